"""RawData -> the canonical tables and metadata of a dataset dir (deduplicate, split, size, count).

What is counted where (metadata.json):
- `n_users`, `n_items`, `n_entities`, `n_relations`: sizes of the id spaces, i.e. max id + 1 over the
  data and its side files (list files, links). Items are entities `0..n_items-1`.
- `n_interactions`: distinct (user, item) pairs per split, after deduplication.
- `n_triples`: distinct (head, relation, tail) rows. `n_kg_entities`: distinct entities that occur in a
  triple. `n_items_with_triples`: items among them.
- `dropped`: rows removed, by reason. `reported`: oddities kept as they are, by kind.
"""

from __future__ import annotations

import polars as pl

from kg_data import __version__
from kg_data.errors import KGDataError
from kg_data.schema import FORMAT_VERSION, ID_TABLES, SPLITS, RawData
from kg_data.splits import split_per_user

_SPLIT_RANK = {name: rank for rank, name in enumerate(SPLITS)}


def assemble(data: RawData, ratios: tuple[float, float, float], seed: int) -> tuple[dict[str, pl.DataFrame], dict]:
    """The Parquet tables (file name -> frame) and the metadata (without source hashes) of `data`."""
    if data.interactions.height == 0:
        raise KGDataError(f"no interactions found in {', '.join(p.name for p in data.sources)}; a dataset needs at least one")
    if data.triples.height == 0:
        raise KGDataError(f"no triples found in {', '.join(p.name for p in data.sources)}; a dataset needs a knowledge graph")
    dropped, reported = dict(data.dropped), dict(data.reported)
    interactions, split_info = _deduplicated_and_split(data, ratios, seed, dropped)
    triples = data.triples.unique(maintain_order=True)
    dropped["duplicate_triples"] = data.triples.height - triples.height

    n_users = max(data.n_users, int(interactions["user"].max()) + 1)
    n_items = max(data.n_items, int(interactions["item"].max()) + 1)
    kg_entities = pl.concat([triples["head"], triples["tail"]]).unique()
    n_entities = max(data.n_entities, n_items, int(kg_entities.max()) + 1)
    n_relations = max(data.n_relations, int(triples["relation"].max()) + 1)
    items_in_kg = kg_entities.filter(kg_entities < n_items)

    reported["users_without_interactions"] = n_users - interactions["user"].n_unique()
    reported["items_without_interactions"] = n_items - interactions["item"].n_unique()
    reported["items_without_triples"] = n_items - items_in_kg.len()
    reported["interactions_with_items_without_triples"] = interactions.filter(~pl.col("item").is_in(items_in_kg.implode())).height

    sizes = {"n_users": n_users, "n_items": n_items, "n_entities": n_entities, "n_relations": n_relations}
    counts = interactions.group_by("split").len()
    metadata = {
        "format_version": FORMAT_VERSION,
        "source_format": data.source_format,
        **sizes,
        "n_triples": triples.height,
        "n_interactions": {s: int(counts.filter(pl.col("split") == s)["len"].sum()) for s in SPLITS},
        "n_kg_entities": kg_entities.len(),
        "n_items_with_triples": items_in_kg.len(),
        "dropped": dropped,
        "reported": reported,
        "split": split_info,
        "created_by": f"kg_data {__version__}",
    }
    tables = {
        "interactions.parquet": interactions.sort(pl.col("split").replace_strict(_SPLIT_RANK), "user", "item").select(
            pl.col("user").cast(pl.Int32), pl.col("item").cast(pl.Int32), "split"
        ),
        "triples.parquet": triples.sort("head", "relation", "tail").select(pl.all().cast(pl.Int32)),
    }
    for file, (kind, size_key) in ID_TABLES.items():
        tables[file] = _id_table(sizes[size_key], data.names.get(kind))
    return tables, metadata


def _deduplicated_and_split(
    data: RawData, ratios: tuple[float, float, float], seed: int, dropped: dict[str, int]
) -> tuple[pl.DataFrame, dict]:
    """Distinct (user, item) pairs with their split: the given one, else a per-user split."""
    raw = data.interactions
    if data.has_splits:
        within = raw.unique(["user", "item", "split"], keep="first", maintain_order=True)
        dropped["duplicate_interactions"] = raw.height - within.height
        # A pair in two splits would leak from train into evaluation: keep it in the earliest split.
        across = within.sort(pl.col("split").replace_strict(_SPLIT_RANK), maintain_order=True).unique(
            ["user", "item"], keep="first", maintain_order=True
        )
        dropped["interactions_repeated_across_splits"] = within.height - across.height
        return across.select("user", "item", "split"), {"method": "given"}
    distinct = raw.unique(["user", "item"], keep="first", maintain_order=True)
    dropped["duplicate_interactions"] = raw.height - distinct.height
    split, how = split_per_user(distinct.select("user", "item", "timestamp"), ratios, seed)
    return split.select("user", "item", "split"), how


def _id_table(size: int, names: pl.DataFrame | None) -> pl.DataFrame:
    """`id` 0..size-1 with the raw name of each id where the raw data has one (else null)."""
    ids = pl.DataFrame({"id": pl.int_range(size, dtype=pl.Int32, eager=True)})
    if names is None:
        return ids.with_columns(name=pl.lit(None, pl.String))
    names = names.select(pl.col("id").cast(pl.Int32), pl.col("name").cast(pl.String)).unique("id", keep="first")
    return ids.join(names, on="id", how="left", maintain_order="left")
