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

import numpy as np
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
    triples = _distinct_triples(data.triples)
    dropped["duplicate_triples"] = data.triples.height - triples.height

    n_users = max(data.n_users, int(interactions["user"].max()) + 1)
    n_items = max(data.n_items, int(interactions["item"].max()) + 1)
    heads, tails = triples["head"].to_numpy(), triples["tail"].to_numpy()
    n_entities = max(data.n_entities, n_items, int(max(heads.max(), tails.max())) + 1)
    n_relations = max(data.n_relations, int(triples["relation"].max()) + 1)
    _check_dense(data, "users", n_users, data.n_users, interactions["user"])
    _check_dense(data, "items", n_items, data.n_items, interactions["item"])
    _check_dense(data, "entities", n_entities, max(data.n_entities, n_items), pl.concat([triples["head"], triples["tail"]]))
    _check_dense(data, "relations", n_relations, data.n_relations, triples["relation"])

    # Degrees by bincount: exact, and much faster than hashing for dense int ids.
    in_kg = (np.bincount(heads, minlength=n_entities) + np.bincount(tails, minlength=n_entities)) > 0
    item_in_kg = in_kg[:n_items]
    item_degree = np.bincount(interactions["item"].to_numpy(), minlength=n_items)
    user_degree = np.bincount(interactions["user"].to_numpy(), minlength=n_users)
    reported["users_without_interactions"] = int((user_degree == 0).sum())
    reported["items_without_interactions"] = int((item_degree == 0).sum())
    reported["items_without_triples"] = int((~item_in_kg).sum())
    reported["interactions_with_items_without_triples"] = int(item_degree[~item_in_kg].sum())

    sizes = {"n_users": n_users, "n_items": n_items, "n_entities": n_entities, "n_relations": n_relations}
    counts = interactions.select((pl.col("split") == s).sum().alias(s) for s in SPLITS).row(0, named=True)
    metadata = {
        "format_version": FORMAT_VERSION,
        "source_format": data.source_format,
        **sizes,
        "n_triples": triples.height,
        "n_interactions": {s: int(counts[s]) for s in SPLITS},
        "n_kg_entities": int(in_kg.sum()),
        "n_items_with_triples": int(item_in_kg.sum()),
        "dropped": dropped,
        "reported": reported,
        "split": split_info,
        "created_by": f"kg_data {__version__}",
    }
    tables = {
        "interactions.parquet": interactions.select(pl.col("user").cast(pl.Int32), pl.col("item").cast(pl.Int32), "split"),
        "triples.parquet": triples.select(pl.col("head", "relation", "tail").cast(pl.Int32)),
    }
    for file, (kind, size_key) in ID_TABLES.items():
        tables[file] = _id_table(sizes[size_key], data.names.get(kind))
    return tables, metadata


def _deduplicated_and_split(
    data: RawData, ratios: tuple[float, float, float], seed: int, dropped: dict[str, int]
) -> tuple[pl.DataFrame, dict]:
    """Distinct (user, item) pairs with their split (the given one, else a per-user split).

    Given splits keep the raw order when there is nothing to drop; otherwise rows come sorted by
    split, user, item.

    Pairs are compared through one Int64 key (`user * 2**31 + item`, exact for int32 ids): a hash of
    one integer column is several times faster than of two, and clean data (no duplicates) only pays
    for one `n_unique`.
    """
    raw = data.interactions.with_columns(_key=pl.col("user") * 2**31 + pl.col("item"))
    clean = raw["_key"].n_unique() == raw.height
    if data.has_splits:
        if clean:  # keep the order of the raw files
            dropped["duplicate_interactions"] = dropped["interactions_repeated_across_splits"] = 0
            return raw.select("user", "item", "split"), {"method": "given"}
        ranked = raw.with_columns(_rank=pl.col("split").replace_strict(_SPLIT_RANK, return_dtype=pl.Int8)).sort("_rank", "_key")
        repeated = (pl.col("_key") == pl.col("_key").shift(1)) & (pl.col("_rank") == pl.col("_rank").shift(1))
        within = ranked.filter(~repeated.fill_null(False))
        # A pair in two splits would leak from train into evaluation: keep it in the earliest split.
        across = within.filter(pl.col("_key").is_first_distinct())  # cheaper than unique(maintain_order)
        dropped["duplicate_interactions"] = raw.height - within.height
        dropped["interactions_repeated_across_splits"] = within.height - across.height
        return across.select("user", "item", "split"), {"method": "given"}
    distinct = raw if clean else raw.filter(pl.col("_key").is_first_distinct())
    dropped["duplicate_interactions"] = raw.height - distinct.height
    split, how = split_per_user(distinct.select("user", "item", "timestamp"), ratios, seed)
    ordered = split.with_columns(_rank=pl.col("split").replace_strict(_SPLIT_RANK, return_dtype=pl.Int8)).sort("_rank", "user", "item")
    return ordered.select("user", "item", "split"), how


#: An id space may be this much larger than the number of id occurrences before it counts as sparse.
SPARSE_FACTOR = 10
SPARSE_MIN_SIZE = 1_000_000


def _check_dense(data: RawData, kind: str, size: int, declared: int, ids: pl.Series) -> None:
    """Refuse sparse integer ids: every id 0..size-1 gets a row in the id tables and the graphs, so
    ids like 2,000,000,000 for a few thousand things would blow memory up instead of failing. A size
    that side files declare (list files, links) is taken as it is. Compared with the number of
    occurrences, not of distinct ids: no hashing, and memory stays within 10x the data's."""
    if size <= max(declared, SPARSE_MIN_SIZE):
        return
    if size > SPARSE_FACTOR * ids.len():
        raise KGDataError(
            f"{kind} ids reach {size - 1:,} but only {ids.len():,} rows mention any in "
            f"{', '.join(p.name for p in data.sources)}; {data.source_format} files need dense remapped ids "
            "(the plain-table format remaps sparse ids or string tokens for you)"
        )


def _distinct_triples(triples: pl.DataFrame) -> pl.DataFrame:
    """The first occurrence of each (head, relation, tail), in file order.

    When the ids fit, the triple is packed into one Int64 key (hashing one column is much faster
    than three, and clean data only pays for one `n_unique`).
    """
    n_entities = int(max(triples["head"].max(), triples["tail"].max())) + 1
    n_relations = int(triples["relation"].max()) + 1
    if n_entities * n_entities * n_relations >= 2**62:
        return triples.unique(keep="first", maintain_order=True)
    keyed = triples.with_columns(
        _key=(pl.col("head") * n_relations + pl.col("relation")) * n_entities + pl.col("tail")
    )
    if keyed["_key"].n_unique() == keyed.height:
        return triples
    return keyed.filter(pl.col("_key").is_first_distinct()).drop("_key")


def _id_table(size: int, names: pl.DataFrame | None) -> pl.DataFrame:
    """`id` 0..size-1 with the raw name of each id where the raw data has one (else null)."""
    ids = pl.DataFrame({"id": pl.int_range(size, dtype=pl.Int32, eager=True)})
    if names is None:
        return ids.with_columns(name=pl.lit(None, pl.String))
    names = names.select(pl.col("id").cast(pl.Int32), pl.col("name").cast(pl.String))
    if names.height == size and (names["id"] == ids["id"]).all():  # a complete list in id order
        return names
    return ids.join(names.unique("id", keep="first"), on="id", how="left", maintain_order="left")
