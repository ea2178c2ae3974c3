"""KGCN format (Wang et al. 2019): `ratings_final.txt` and `kg_final.txt`, no splits.

- `ratings_final.txt`: `user item label` per line; label 1 is an interaction, label 0 a negative that
  KGCN's preprocessing sampled. Negatives are dropped and counted (`dropped.negative_samples`): the
  dataset holds implicit positives only and samplers draw their own negatives.
- `kg_final.txt`: `head relation tail`. KGCN's preprocessing numbers items first, so item `i` is
  entity `i`, as in KGAT.
- Optional `item_index2entity_id.txt` (`original_item_id entity_id`): names the items.
Splits are made by ingest (per user, random with the seed): the raw data has none.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kg_data.errors import IngestError
from kg_data.formats._text import read_fields
from kg_data.progress import FileProgress, NoProgress
from kg_data.schema import RawData

REQUIRED = ("ratings_final.txt", "kg_final.txt")
_HINT = "; KGCN files hold non-negative integer ids separated by tabs or spaces"


def read_kgcn(raw_dir: Path, progress: FileProgress | None = None) -> RawData:
    """Read a KGCN dir (see the module docstring) into a `RawData`."""
    progress = progress or NoProgress()
    for name in REQUIRED:
        if not (raw_dir / name).is_file():
            raise IngestError(raw_dir / name, None, "missing required file (a KGCN dir needs ratings_final.txt and kg_final.txt)")

    ratings_path = raw_dir / "ratings_final.txt"
    ratings = read_fields(ratings_path, ["user", "item", "label"], what="KGCN ratings, 'user item label' per line", hint=_HINT)
    bad_label = ratings.filter(~pl.col("label").is_in([0, 1]))
    if bad_label.height:
        raise IngestError(
            ratings_path,
            int(bad_label["line"][0]),
            f"label {bad_label['label'][0]} is not 0 or 1 (1 = interaction, 0 = sampled negative)",
        )
    progress.done(ratings_path)

    kg_path = raw_dir / "kg_final.txt"
    triples = read_fields(kg_path, ["head", "relation", "tail"], what="KGCN triples, 'head relation tail' per line", hint=_HINT)
    progress.done(kg_path)

    positives = ratings.filter(pl.col("label") == 1)
    data = RawData(
        source_format="kgcn",
        interactions=positives.select("user", "item", split=pl.lit(None, pl.String), timestamp=pl.lit(None, pl.Float64)),
        triples=triples.select("head", "relation", "tail"),
        sources=[raw_dir / n for n in (*REQUIRED, "item_index2entity_id.txt") if (raw_dir / n).is_file()],
        # Users and items seen only in negatives still exist (KGCN numbered them): keep their ids.
        n_users=int(ratings["user"].max()) + 1,
        n_items=int(ratings["item"].max()) + 1,
        dropped={"negative_samples": ratings.height - positives.height},
    )
    names_path = raw_dir / "item_index2entity_id.txt"
    if names_path.is_file():
        mapping = read_fields(
            names_path,
            ["original_id", "entity"],
            ints=["entity"],
            what="KGCN item map, 'original_item_id entity_id' per line",
        )
        data.names["items"] = mapping.filter(pl.col("entity") < data.n_items).select(id="entity", name="original_id").unique("id", keep="first")
        progress.done(names_path)
    return data
