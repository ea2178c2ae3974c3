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
from kg_data.formats._text import iter_fields, read_fields
from kg_data.progress import FileProgress, NoProgress
from kg_data.schema import RawData
from kg_data.staging import Scratch

REQUIRED = ("ratings_final.txt", "kg_final.txt")
_HINT = "; KGCN files hold non-negative integer ids separated by tabs or spaces"


def read_kgcn(raw_dir: Path, progress: FileProgress | None = None, scratch: Scratch | None = None) -> RawData:
    """Read a KGCN dir (see the module docstring) into a `RawData`, block by block into `scratch`."""
    progress = progress or NoProgress()
    scratch = scratch or Scratch()
    for name in REQUIRED:
        if not (raw_dir / name).is_file():
            raise IngestError(raw_dir / name, None, "missing required file (a KGCN dir needs ratings_final.txt and kg_final.txt)")

    ratings_path = raw_dir / "ratings_final.txt"
    positives = scratch.table("interactions")
    negatives, top_user, top_item = 0, -1, -1
    for block in iter_fields(ratings_path, ["user", "item", "label"], what="KGCN ratings, 'user item label' per line", hint=_HINT, progress=progress):
        bad_label = block.filter(~pl.col("label").is_in([0, 1]))
        if bad_label.height:
            raise IngestError(
                ratings_path,
                int(bad_label["line"][0]),
                f"label {bad_label['label'][0]} is not 0 or 1 (1 = interaction, 0 = sampled negative)",
            )
        # Users and items seen only in negatives still exist (KGCN numbered them): keep their ids.
        top_user, top_item = max(top_user, int(block["user"].max())), max(top_item, int(block["item"].max()))
        kept = block.filter(pl.col("label") == 1)
        negatives += block.height - kept.height
        positives.write(kept.select(pl.col("user", "item").cast(pl.Int32), split=pl.lit(None, pl.Int8), timestamp=pl.lit(None, pl.Float64)))
    progress.done(ratings_path)

    kg_path = raw_dir / "kg_final.txt"
    triples = scratch.table("triples")
    for block in iter_fields(kg_path, ["head", "relation", "tail"], what="KGCN triples, 'head relation tail' per line", hint=_HINT, progress=progress):
        triples.write(block.select(pl.col("head", "relation", "tail").cast(pl.Int32)))
    progress.done(kg_path)

    empty = {"user": pl.Int32, "item": pl.Int32, "split": pl.Int8, "timestamp": pl.Float64}
    data = RawData(
        source_format="kgcn",
        interactions=positives.lazy(empty),
        triples=triples.lazy(),
        sources=[raw_dir / n for n in (*REQUIRED, "item_index2entity_id.txt") if (raw_dir / n).is_file()],
        n_users=top_user + 1,
        n_items=top_item + 1,
        dropped={"negative_samples": negatives},
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
