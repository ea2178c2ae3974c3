"""The canonical dataset: file names, columns and dtypes of a dataset dir, and what readers hand over.

A format reader (`kg_data.formats.*`) turns raw files into a `RawData`: integer ids already dense,
splits when the raw data has them, and the counts of what it dropped or noticed. `kg_data.assemble`
then deduplicates, splits, sizes the id spaces and builds the tables described here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

#: Bumped when the layout of a dataset dir changes; `KGDataset.open` refuses other versions.
FORMAT_VERSION = 1
SPLITS = ("train", "valid", "test")
METADATA_FILE = "metadata.json"

INTERACTIONS_SCHEMA = {"user": pl.Int32, "item": pl.Int32, "split": pl.String}
TRIPLES_SCHEMA = {"head": pl.Int32, "relation": pl.Int32, "tail": pl.Int32}
ID_TABLE_SCHEMA = {"id": pl.Int32, "name": pl.String}

#: file name -> schema, for every Parquet file of a dataset dir.
TABLES = {
    "interactions.parquet": INTERACTIONS_SCHEMA,
    "triples.parquet": TRIPLES_SCHEMA,
    "users.parquet": ID_TABLE_SCHEMA,
    "items.parquet": ID_TABLE_SCHEMA,
    "entities.parquet": ID_TABLE_SCHEMA,
    "relations.parquet": ID_TABLE_SCHEMA,
}
#: id table file -> the key of its names in `RawData.names` and of its size in the metadata.
ID_TABLES = {
    "users.parquet": ("users", "n_users"),
    "items.parquet": ("items", "n_items"),
    "entities.parquet": ("entities", "n_entities"),
    "relations.parquet": ("relations", "n_relations"),
}


@dataclass
class RawData:
    """What a format reader extracted, before deduplication and splitting.

    `interactions`: `user`, `item` (integer dense ids), `split` (Int8 codes 0/1/2 = `SPLITS`
    train/valid/test, null where the raw data has no splits), `timestamp` (Float64, null where unknown). `triples`: `head`, `relation`, `tail` (integer
    ids; items are entities `0..n_items-1`). Both are lazy frames, usually scans of scratch tables
    (`kg_data.staging`), so nothing the size of the input needs to stay in memory. The `n_*` fields are
    lower bounds on the id spaces from side files (list files, link files); ingest takes the larger of
    them and the ids actually seen. `names`: for "users", "items", "entities", "relations", an (`id`
    Int64, `name` String) frame.
    """

    source_format: str
    interactions: pl.LazyFrame
    triples: pl.LazyFrame
    sources: list[Path]
    n_users: int = 0
    n_items: int = 0
    n_entities: int = 0
    n_relations: int = 0
    names: dict[str, pl.DataFrame] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    reported: dict[str, int] = field(default_factory=dict)

    @property
    def has_splits(self) -> bool:
        """True when every interaction came with its split (KGAT files, a `split` column)."""
        counts = self.interactions.select(pl.len(), pl.col("split").null_count()).collect(engine="streaming")
        rows, missing = counts.row(0)
        return rows > 0 and missing == 0
