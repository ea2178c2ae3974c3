"""RawData -> the canonical tables and metadata of a dataset dir (deduplicate, drop, split, size, count).

Memory stays bounded however large the input: rows stream from the readers' scratch tables, are
deduplicated and split one bucket of ids at a time (`kg_data.buckets`), and the two big tables come
back as lazy frames that the writer sinks to Parquet. What grows with the data is only what the
output itself needs: arrays over the id spaces (degrees, which entities occur in the KG), the id
tables, and the row numbers of duplicate triples (8 bytes per duplicate).

What is counted where (metadata.json):
- `n_users`, `n_items`, `n_entities`, `n_relations`: sizes of the id spaces, i.e. max id + 1 over the
  data and its side files (list files, links). Items are entities `0..n_items-1`. Items whose
  interactions `drop_unlinked_items` dropped keep their ids.
- `n_interactions`: distinct (user, item) pairs per split, after deduplication and dropping.
- `n_triples`: distinct (head, relation, tail) rows. `n_kg_entities`: distinct entities that occur in a
  triple. `n_items_with_triples`: items among them (the items "linked" to the KG).
- `dropped`: rows removed, by reason. `reported`: oddities kept as they are, by kind.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from kg_data import __version__
from kg_data.buckets import range_buckets
from kg_data.errors import KGDataError
from kg_data.progress import FileProgress, NoProgress
from kg_data.schema import FORMAT_VERSION, ID_TABLES, SPLITS, RawData
from kg_data.splits import SplitOptions, assign_splits, random_keys, resolve_method
from kg_data.staging import Scratch, iter_batches
from kg_data.writer import LazyTable

_PAIR_KEY = pl.col("user").cast(pl.Int64) * 2**31 + pl.col("item").cast(pl.Int64)  # exact for int32 ids
_BATCH_ROWS = 1 << 20

Tables = dict[str, pl.DataFrame | LazyTable]


def assemble(
    data: RawData,
    split: SplitOptions | None = None,
    scratch: Scratch | None = None,
    *,
    drop_unlinked_items: bool = False,
    progress: FileProgress | None = None,
) -> tuple[Tables, dict]:
    """The Parquet tables (file name -> frame; the big two streamed) and the metadata (without source
    hashes) of `data`. `drop_unlinked_items` drops the interactions of items that occur in no triple,
    before splitting, as RecBole's KG datasets do."""
    split = split or SplitOptions()
    scratch = scratch or Scratch()
    progress = progress or NoProgress()
    sources = ", ".join(p.name for p in data.sources)
    inter = data.interactions.select(
        rows=pl.len(),
        top_user=pl.col("user").max(),
        top_item=pl.col("item").max(),
        with_split=pl.col("split").is_not_null().sum(),
        with_timestamp=pl.col("timestamp").is_not_null().sum(),
    ).collect(engine="streaming").row(0, named=True)
    if inter["rows"] == 0:
        raise KGDataError(f"no interactions found in {sources}; a dataset needs at least one")
    kg = data.triples.select(
        rows=pl.len(), top_entity=pl.max_horizontal(pl.col("head").max(), pl.col("tail").max()), top_relation=pl.col("relation").max()
    ).collect(engine="streaming").row(0, named=True)
    if kg["rows"] == 0:
        raise KGDataError(f"no triples found in {sources}; a dataset needs a knowledge graph")

    n_users = max(data.n_users, inter["top_user"] + 1)
    n_items = max(data.n_items, inter["top_item"] + 1)
    n_entities = max(data.n_entities, n_items, kg["top_entity"] + 1)
    n_relations = max(data.n_relations, kg["top_relation"] + 1)
    _check_dense(data, "users", n_users, data.n_users, inter["rows"])
    _check_dense(data, "items", n_items, data.n_items, inter["rows"])
    _check_dense(data, "entities", n_entities, max(data.n_entities, n_items), 2 * kg["rows"])
    _check_dense(data, "relations", n_relations, data.n_relations, kg["rows"])

    progress.stage("deduplicating triples")
    triples, n_triples = _distinct_triples(data.triples, scratch, n_entities, n_relations)
    in_kg = _entities_in_kg(triples, n_entities)
    linked = in_kg[:n_items] if drop_unlinked_items else None

    progress.stage("splitting interactions")
    dropped = dict(data.dropped)
    if split.method == "auto" and inter["with_split"] == inter["rows"]:
        interactions, counts = _keep_given_splits(data.interactions, scratch, linked, dropped)
        split_info = {"method": "given"}
    else:
        method = resolve_method(split, inter["rows"], inter["with_timestamp"], data.source_format)
        interactions, counts = _split_per_user(data.interactions, split, method, scratch, linked, dropped)
        split_info = split.describe(method)
    split_info["drop_unlinked_items"] = drop_unlinked_items
    unlinked = dropped.pop("_unlinked")
    dropped["duplicate_triples"] = kg["rows"] - n_triples
    dropped["interactions_with_items_without_triples"] = unlinked

    user_degree = _degrees(interactions, "user", n_users)
    item_degree = _degrees(interactions, "item", n_items)
    item_in_kg = in_kg[:n_items]
    reported = dict(data.reported)
    reported["users_without_interactions"] = int((user_degree == 0).sum())
    reported["items_without_interactions"] = int((item_degree == 0).sum())
    reported["items_without_triples"] = int((~item_in_kg).sum())
    reported["interactions_with_items_without_triples"] = int(item_degree[~item_in_kg].sum())

    sizes = {"n_users": n_users, "n_items": n_items, "n_entities": n_entities, "n_relations": n_relations}
    metadata = {
        "format_version": FORMAT_VERSION,
        "source_format": data.source_format,
        **sizes,
        "n_triples": n_triples,
        "n_interactions": {s: int(counts[rank]) for rank, s in enumerate(SPLITS)},
        "n_kg_entities": int(in_kg.sum()),
        "n_items_with_triples": int(item_in_kg.sum()),
        "dropped": dropped,
        "reported": reported,
        "split": split_info,
        "created_by": f"kg_data {__version__}",
    }
    tables: Tables = {
        "interactions.parquet": LazyTable(
            interactions.select(pl.col("user").cast(pl.Int32), pl.col("item").cast(pl.Int32), pl.col("split").cast(pl.Int8)), labels={"split": SPLITS}
        ),
        "triples.parquet": LazyTable(triples.select(pl.col("head", "relation", "tail").cast(pl.Int32))),
    }
    for file, (kind, size_key) in ID_TABLES.items():
        tables[file] = _id_table(sizes[size_key], data.names.get(kind))
    return tables, metadata


# --- interactions ---------------------------------------------------------------------------------


def _keep_given_splits(
    raw: pl.LazyFrame, scratch: Scratch, linked: np.ndarray | None, dropped: dict[str, int]
) -> tuple[pl.LazyFrame, np.ndarray]:
    """Distinct (user, item) pairs in the split the data gave them; a pair in several splits stays in
    the earliest of train, valid, test (else it would leak from train into evaluation).

    Clean data (no duplicate pair) keeps the raw order, streamed straight from the scratch table;
    otherwise rows come sorted by split, user, item. A first pass over the buckets of users only
    counts (usually all there is to do); a second one writes the deduplicated rows when needed.
    """
    ranked = raw.select("user", "item", _rank=pl.col("split").cast(pl.Int8))
    buckets = range_buckets(ranked, "user", scratch)
    within = across = unlinked = 0
    counts = np.zeros(len(SPLITS), dtype=np.int64)
    for bucket in buckets:
        frame = bucket.collect()
        kept, n_within, n_across = _deduplicated_given(frame)
        kept, n_unlinked = _drop_unlinked(kept, linked)
        within, across, unlinked = within + n_within, across + n_across, unlinked + n_unlinked
        counts += np.bincount(kept["_rank"].to_numpy(), minlength=len(SPLITS))
    dropped["duplicate_interactions"] = within
    dropped["interactions_repeated_across_splits"] = across
    dropped["_unlinked"] = unlinked
    if within + across == 0:
        for bucket in buckets:
            bucket.remove()
        kept_lazy = raw if linked is None else raw.filter(pl.col("item").is_in(pl.Series(np.flatnonzero(linked)).implode()))
        return kept_lazy.select("user", "item", pl.col("split").cast(pl.Int8)), counts
    parts = [scratch.table(f"interactions-{name}") for name in SPLITS]
    for bucket in buckets:
        kept, _, _ = _deduplicated_given(bucket.collect())
        kept, _ = _drop_unlinked(kept, linked)
        _write_by_rank(kept.sort("_rank", "user", "item"), parts)
        bucket.remove()
    return _concat_by_rank(parts), counts


def _deduplicated_given(frame: pl.DataFrame) -> tuple[pl.DataFrame, int, int]:
    """(kept rows, duplicates within a split, pairs dropped from a later split) of one bucket."""
    keyed = frame.with_columns(_key=_PAIR_KEY)
    if keyed["_key"].n_unique() == keyed.height:
        return keyed, 0, 0
    ranked = keyed.sort("_rank", "_key")
    repeated = (pl.col("_key") == pl.col("_key").shift(1)) & (pl.col("_rank") == pl.col("_rank").shift(1))
    within = ranked.filter(~repeated.fill_null(False))
    across = within.filter(pl.col("_key").is_first_distinct())  # cheaper than unique(maintain_order)
    return across, keyed.height - within.height, within.height - across.height


def _split_per_user(
    raw: pl.LazyFrame, options: SplitOptions, method: str, scratch: Scratch, linked: np.ndarray | None, dropped: dict[str, int]
) -> tuple[pl.LazyFrame, np.ndarray]:
    """Distinct pairs (the first occurrence of each), split per user by `method` (`kg_data.splits`);
    rows come sorted by split, user, item.

    The random order draws one number per distinct pair, in file order, from one stream (as
    `splits.split_per_user` does in memory), so it depends neither on how the rows fall into buckets
    nor on the repeats: the keys are drawn while the rows are partitioned, and when some pairs repeat,
    a first pass over the buckets finds the repeated rows and the partition is redone without them.
    """
    frame = raw.select("user", "item", "timestamp")
    if method == "random":
        buckets = range_buckets(frame, "user", scratch, decorate=_random_keys(options.seed, None))
        repeated = _repeated_rows(buckets)
        if len(repeated):
            for bucket in buckets:
                bucket.remove()
            buckets = range_buckets(frame, "user", scratch, decorate=_random_keys(options.seed, repeated))
    else:
        buckets = range_buckets(frame, "user", scratch, decorate=lambda batch: batch.with_columns(_key=pl.col("timestamp")))
    parts = [scratch.table(f"interactions-{name}") for name in SPLITS]
    duplicates = unlinked = 0
    counts = np.zeros(len(SPLITS), dtype=np.int64)
    for bucket in buckets:
        frame = bucket.collect().with_columns(_pair=_PAIR_KEY)
        distinct = frame if frame["_pair"].n_unique() == frame.height else frame.filter(pl.col("_pair").is_first_distinct())
        duplicates += frame.height - distinct.height
        distinct, n_unlinked = _drop_unlinked(distinct, linked)
        unlinked += n_unlinked
        ranked = assign_splits(distinct, options.ratios, options.rounding)
        counts += np.bincount(ranked["_rank"].to_numpy(), minlength=len(SPLITS))
        _write_by_rank(ranked.sort("_rank", "user", "item"), parts)
        bucket.remove()
    dropped["duplicate_interactions"] = duplicates
    dropped["_unlinked"] = unlinked
    return _concat_by_rank(parts), counts


def _random_keys(seed: int, repeated: np.ndarray | None) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """A `range_buckets` decoration adding `_key`: the next numbers of the seed's stream for the rows
    of each batch, skipping the rows in `repeated` (sorted `_row` numbers of repeated pairs; their key
    is never used)."""
    draw = random_keys(seed)

    def decorate(batch: pl.DataFrame) -> pl.DataFrame:
        if repeated is None:
            return batch.with_columns(_key=pl.Series(draw(batch.height)))
        skip = _is_in_sorted(batch["_row"].to_numpy(), repeated)
        keys = np.full(batch.height, np.nan)
        keys[~skip] = draw(int((~skip).sum()))
        return batch.with_columns(_key=pl.Series(keys))

    return decorate


def _repeated_rows(buckets: list) -> np.ndarray:
    """The sorted `_row` numbers of rows that repeat an earlier (user, item) pair (8 bytes per repeat)."""
    found = []
    for bucket in buckets:
        frame = bucket.collect().select("_row", _pair=_PAIR_KEY)
        if frame["_pair"].n_unique() != frame.height:
            found.append(frame.filter(~pl.col("_pair").is_first_distinct())["_row"].to_numpy())
    return np.sort(np.concatenate(found)) if found else np.empty(0, dtype=np.int64)


def _is_in_sorted(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """A mask of the `values` found in the sorted array `sorted_set`."""
    if len(sorted_set) == 0:
        return np.zeros(len(values), dtype=bool)
    at = np.searchsorted(sorted_set, values)
    return sorted_set[np.minimum(at, len(sorted_set) - 1)] == values


def _drop_unlinked(frame: pl.DataFrame, linked: np.ndarray | None) -> tuple[pl.DataFrame, int]:
    if linked is None:
        return frame, 0
    kept = frame.filter(pl.Series(linked[frame["item"].to_numpy()]))
    return kept, frame.height - kept.height


def _write_by_rank(frame: pl.DataFrame, parts: list) -> None:
    """Rows sorted by `_rank` -> (user, item) appended to the table of their split."""
    bounds = np.searchsorted(frame["_rank"].to_numpy(), np.arange(len(SPLITS) + 1))
    for rank, table in enumerate(parts):
        table.write(frame.slice(int(bounds[rank]), int(bounds[rank + 1] - bounds[rank])).select("user", "item"))


def _concat_by_rank(parts: list) -> pl.LazyFrame:
    schema = {"user": pl.Int32, "item": pl.Int32}
    return pl.concat([table.lazy(schema).select(pl.col("user", "item").cast(pl.Int32), split=pl.lit(rank, pl.Int8)) for rank, table in enumerate(parts)])


def _degrees(interactions: pl.LazyFrame, column: str, size: int) -> np.ndarray:
    """Rows per id of `column` (a bincount over batches: memory is the id space, not the rows)."""
    degree = np.zeros(size, dtype=np.int64)
    for batch in iter_batches(interactions.select(column), _BATCH_ROWS):
        degree += np.bincount(batch[column].to_numpy(), minlength=size)
    return degree


# --- triples --------------------------------------------------------------------------------------


def _distinct_triples(triples: pl.LazyFrame, scratch: Scratch, n_entities: int, n_relations: int) -> tuple[pl.LazyFrame, int]:
    """The first occurrence of each (head, relation, tail), in file order, and how many there are.

    Duplicates are found per bucket of heads; clean data (the usual case) is then passed on as it is.
    Otherwise the raw rows stream once more, minus the rows found to repeat an earlier one. When the
    ids fit, a triple is packed into one Int64 key (hashing one column is much faster than three).
    """
    frame = triples.select("head", "relation", "tail")
    buckets = range_buckets(frame, "head", scratch)
    repeats = []
    rows = 0
    for bucket in buckets:
        part = bucket.collect()
        rows += part.height
        first = _first_occurrences(part, n_entities, n_relations)
        if first is not None:
            repeats.append(part.filter(~first)["_row"].to_numpy())
        if len(buckets) > 1:
            bucket.remove()
    if not repeats:
        return frame, rows
    drop = np.sort(np.concatenate(repeats))
    if len(buckets) == 1:  # the one bucket holds every row, in file order
        return buckets[0].collect().filter(~pl.col("_row").is_in(pl.Series(drop).implode())).drop("_row").lazy(), rows - len(drop)
    kept = scratch.table("triples-distinct")
    offset = 0
    for batch in iter_batches(frame, _BATCH_ROWS):
        repeated = _is_in_sorted(np.arange(offset, offset + batch.height), drop)
        offset += batch.height
        kept.write(batch.filter(pl.Series(~repeated)))
    return kept.lazy(), rows - len(drop)


def _first_occurrences(part: pl.DataFrame, n_entities: int, n_relations: int) -> pl.Series | None:
    """A mask of the rows that are the first of their triple in `part` (in `_row` order), or None
    when every row is distinct."""
    if n_entities * n_entities * n_relations < 2**62:
        key = (pl.col("head").cast(pl.Int64) * n_relations + pl.col("relation")) * n_entities + pl.col("tail")
    else:
        key = pl.struct("head", "relation", "tail")
    keyed = part.select(_key=key)
    if keyed["_key"].n_unique() == part.height:
        return None
    return keyed["_key"].is_first_distinct()


def _entities_in_kg(triples: pl.LazyFrame, n_entities: int) -> np.ndarray:
    """A mask over the entity ids: True for those that occur in a triple."""
    in_kg = np.zeros(n_entities, dtype=bool)
    for batch in iter_batches(triples.select("head", "tail"), _BATCH_ROWS):
        in_kg[batch["head"].to_numpy()] = True
        in_kg[batch["tail"].to_numpy()] = True
    return in_kg


# --- sizes and names ------------------------------------------------------------------------------

#: An id space may be this much larger than the number of id occurrences before it counts as sparse.
SPARSE_FACTOR = 10
SPARSE_MIN_SIZE = 1_000_000


def _check_dense(data: RawData, kind: str, size: int, declared: int, mentions: int) -> None:
    """Refuse sparse integer ids: every id 0..size-1 gets a row in the id tables and the graphs, so
    ids like 2,000,000,000 for a few thousand things would blow memory up instead of failing. A size
    that side files declare (list files, links) is taken as it is. Compared with the number of rows
    that mention an id of the kind, before anything is allocated for the id space."""
    if size <= max(declared, SPARSE_MIN_SIZE):
        return
    if size > SPARSE_FACTOR * mentions:
        raise KGDataError(
            f"{kind} ids reach {size - 1:,} but only {mentions:,} rows mention any in "
            f"{', '.join(p.name for p in data.sources)}; {data.source_format} files need dense remapped ids "
            "(the plain-table format remaps sparse ids or string tokens for you)"
        )


def _id_table(size: int, names: pl.DataFrame | None) -> pl.DataFrame:
    """`id` 0..size-1 with the raw name of each id where the raw data has one (else null)."""
    ids = pl.DataFrame({"id": pl.int_range(size, dtype=pl.Int32, eager=True)})
    if names is None:
        return ids.with_columns(name=pl.lit(None, pl.String))
    names = names.select(pl.col("id").cast(pl.Int32), pl.col("name").cast(pl.String))
    if names.height == size and (names["id"] == ids["id"]).all():  # a complete list in id order
        return names
    return ids.join(names.unique("id", keep="first"), on="id", how="left", maintain_order="left")
