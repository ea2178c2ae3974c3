"""assemble: deduplication rules, id-space sizing and the counts written to metadata.json."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kg_data import assemble as assemble_module
from kg_data import buckets
from kg_data.assemble import _distinct_triples, assemble
from kg_data.errors import KGDataError
from kg_data.schema import SPLITS, RawData
from kg_data.splits import SplitOptions
from kg_data.staging import Scratch
from kg_data.writer import LazyTable


def raw(interactions: list[tuple], triples: list[tuple], **kwargs: object) -> RawData:
    inter = pl.DataFrame(interactions, schema={"user": pl.Int64, "item": pl.Int64, "split": pl.String}, orient="row")
    codes = pl.col("split").replace_strict({name: code for code, name in enumerate(SPLITS)}, return_dtype=pl.Int8, default=None)
    return RawData(
        source_format="test",
        interactions=inter.with_columns(split=codes, timestamp=pl.lit(None, pl.Float64)).lazy(),
        triples=pl.DataFrame(triples, schema={"head": pl.Int64, "relation": pl.Int64, "tail": pl.Int64}, orient="row").lazy(),
        sources=[Path("x.txt")],
        **kwargs,
    )


def table(tables: dict, name: str) -> pl.DataFrame:
    """A table of `assemble`'s result as it would be written."""
    found = tables[name]
    return found.collect() if isinstance(found, LazyTable) else found


def test_given_splits_dedup_within_and_across_splits() -> None:
    data = raw(
        [(0, 1, "test"), (0, 1, "train"), (0, 1, "train"), (1, 2, "valid"), (1, 2, "test"), (1, 3, "test")],
        [(0, 0, 4), (0, 0, 4), (1, 0, 4)],
    )
    tables, meta = assemble(data)
    rows = table(tables, "interactions.parquet").rows()
    assert rows == [(0, 1, "train"), (1, 2, "valid"), (1, 3, "test")]  # each pair in its earliest split
    assert meta["dropped"] == {
        "duplicate_interactions": 1, "interactions_repeated_across_splits": 2, "duplicate_triples": 1, "interactions_with_items_without_triples": 0,
    }
    assert meta["n_interactions"] == {"train": 1, "valid": 1, "test": 1}
    assert meta["split"] == {"method": "given", "drop_unlinked_items": False}


def test_clean_given_splits_keep_the_raw_order() -> None:
    data = raw([(1, 0, "train"), (0, 2, "train"), (0, 1, "test")], [(0, 0, 3)])
    tables, meta = assemble(data)
    assert table(tables, "interactions.parquet").rows() == [(1, 0, "train"), (0, 2, "train"), (0, 1, "test")]
    assert meta["dropped"]["duplicate_interactions"] == 0


def test_id_spaces_take_the_larger_of_side_files_and_ids_seen() -> None:
    data = raw([(0, 1, "train"), (4, 0, "test")], [(0, 0, 9), (1, 2, 5)], n_users=2, n_items=3, n_entities=6, n_relations=5)
    tables, meta = assemble(data)
    assert (meta["n_users"], meta["n_items"], meta["n_entities"], meta["n_relations"]) == (5, 3, 10, 5)
    assert table(tables, "users.parquet")["id"].to_list() == [0, 1, 2, 3, 4]
    assert table(tables, "users.parquet")["name"].null_count() == 5
    assert meta["n_kg_entities"] == 4  # 0, 1, 5, 9
    assert meta["n_items_with_triples"] == 2  # items 0 and 1 (item 2 has none)
    assert meta["reported"]["items_without_triples"] == 1
    assert meta["reported"]["users_without_interactions"] == 3  # users 1, 2, 3
    assert meta["reported"]["interactions_with_items_without_triples"] == 0


def test_names_fill_the_id_tables_where_known() -> None:
    names = {"items": pl.DataFrame({"id": [2, 0], "name": ["c", "a"]})}
    tables, _ = assemble(raw([(0, 1, "train")], [(0, 0, 3)], n_items=3, names=names))
    assert table(tables, "items.parquet").rows() == [(0, "a"), (1, None), (2, "c")]
    assert table(tables, "items.parquet").schema == {"id": pl.Int32, "name": pl.String}


def test_missing_splits_are_made_per_user_after_dedup() -> None:
    pairs = [(u, i, None) for u in range(3) for i in range(10)] + [(0, 0, None)]
    tables, meta = assemble(raw(pairs, [(0, 0, 10)]))
    assert meta["dropped"]["duplicate_interactions"] == 1
    assert meta["n_interactions"] == {"train": 24, "valid": 3, "test": 3}
    assert meta["split"]["method"] == "per_user_random"
    assert table(tables, "interactions.parquet").schema == {"user": pl.Int32, "item": pl.Int32, "split": pl.String}


def test_triples_too_large_to_pack_still_dedup() -> None:
    big = 2**31 - 1
    triples = pl.LazyFrame({"head": [big, big, 0], "relation": [7, 7, 0], "tail": [big - 1, big - 1, big]})
    distinct, n = _distinct_triples(triples, Scratch(), n_entities=big + 1, n_relations=8)
    assert distinct.collect().rows() == [(big, 7, big - 1), (0, 0, big)] and n == 2


def test_sparse_ids_are_refused_before_allocating_for_them() -> None:
    data = raw([(0, 0, "train"), (1, 1, "test")], [(0, 0, 2_000_000_000), (1, 0, 5)])
    with pytest.raises(KGDataError, match="entities ids reach 2,000,000,000 but only 4 rows mention any"):
        assemble(data)


def test_a_large_declared_id_space_is_not_sparse() -> None:
    data = raw([(0, 0, "train")], [(0, 0, 1_500_000)], n_entities=2_000_000)
    _, meta = assemble(data)
    assert meta["n_entities"] == 2_000_000


@pytest.mark.parametrize(("interactions", "triples", "message"), [([], [(0, 0, 1)], "no interactions"), ([(0, 0, "train")], [], "no triples")])
def test_empty_data_is_refused(interactions: list, triples: list, message: str) -> None:
    with pytest.raises(KGDataError, match=message):
        assemble(raw(interactions, triples))


def interactions_with_times(n_users: int, seed: int, duplicates: int = 0) -> pl.DataFrame:
    """Users with 1..40 interactions each, timestamps with ties, rows shuffled, some repeated."""
    rng = np.random.default_rng(seed)
    degrees = rng.integers(1, 40, n_users)
    users = np.repeat(np.arange(n_users), degrees)
    items = np.concatenate([rng.choice(300, d, replace=False) for d in degrees])
    rows = pl.DataFrame({"user": users, "item": items, "timestamp": rng.integers(0, 50, len(users)).astype(float)})
    rows = pl.concat([rows, rows.sample(duplicates, seed=seed)]) if duplicates else rows
    return rows.sample(fraction=1.0, shuffle=True, seed=seed)


def timed_raw(rows: pl.DataFrame, triples: list[tuple], split: pl.Expr | None = None) -> RawData:
    inter = rows.with_columns(split=split if split is not None else pl.lit(None, pl.Int8))
    kg = pl.DataFrame(triples, schema={"head": pl.Int64, "relation": pl.Int64, "tail": pl.Int64}, orient="row")
    return RawData(source_format="test", interactions=inter.lazy(), triples=kg.lazy(), sources=[Path("x.txt")])


TRIPLES = [(i, i % 3, 300 + i % 7) for i in range(0, 300, 2)] + [(4, 1, 304), (10, 0, 300), (4, 1, 304)]  # even items linked; 2 repeats


@pytest.mark.parametrize(
    ("split", "options"),
    [
        (None, SplitOptions(seed=3)),  # timestamps on every row: by time
        (None, SplitOptions(method="random", seed=3, rounding="down")),
        (pl.col("user") % 3, SplitOptions()),  # given splits (codes 0/1/2), with pairs repeated within and across
        (pl.col("user") % 3, SplitOptions(method="time", ratios=(0.6, 0.2, 0.2))),  # given splits ignored: re-split
    ],
)
@pytest.mark.parametrize("drop_unlinked", [False, True])
def test_bucketed_on_disk_gives_the_same_tables_as_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: pl.Expr | None, options: SplitOptions, drop_unlinked: bool
) -> None:
    """The streaming path (many buckets on disk) is the in-memory path cut in pieces: same rows, same
    order, same counts, whatever the bucket size."""
    data = timed_raw(interactions_with_times(60, seed=1, duplicates=40), TRIPLES, split)
    whole_tables, whole_meta = assemble(data, options, drop_unlinked_items=drop_unlinked)
    monkeypatch.setattr(buckets, "ROWS_PER_BUCKET", 97)
    made = []
    monkeypatch.setattr(assemble_module, "range_buckets", lambda *a, **k: made.append(buckets.range_buckets(*a, **k)) or made[-1])
    cut_tables, cut_meta = assemble(data, options, Scratch(tmp_path / "scratch"), drop_unlinked_items=drop_unlinked)
    assert len(made[0]) >= 2 and len(made[1]) >= 10  # triples cut by head, interactions by user, on disk
    assert cut_meta == whole_meta
    for name in whole_tables:
        assert table(cut_tables, name).equals(table(whole_tables, name)), name
    assert whole_meta["dropped"]["duplicate_triples"] == 2


def test_dropping_unlinked_items_counts_what_it_drops() -> None:
    rows = [(0, 0, "train"), (0, 1, "train"), (0, 2, "test"), (1, 1, "train"), (1, 3, "valid"), (1, 3, "valid")]
    data = raw(rows, [(0, 0, 5), (2, 0, 5)])  # items 0 and 2 are linked, 1 and 3 are not
    kept, meta = assemble(data, drop_unlinked_items=True)
    assert table(kept, "interactions.parquet").rows() == [(0, 0, "train"), (0, 2, "test")]
    assert meta["dropped"]["interactions_with_items_without_triples"] == 3  # (0,1), (1,1), (1,3) once deduplicated
    assert meta["dropped"]["duplicate_interactions"] == 1
    assert meta["n_items"] == 4 and meta["reported"]["items_without_interactions"] == 2  # dropped items keep their ids
    assert meta["reported"]["interactions_with_items_without_triples"] == 0
    assert meta["split"] == {"method": "given", "drop_unlinked_items": True}
    _, kept_all = assemble(data)
    assert kept_all["dropped"]["interactions_with_items_without_triples"] == 0
    assert kept_all["reported"]["interactions_with_items_without_triples"] == 3


def test_time_split_puts_each_users_newest_in_test_and_random_follows_the_seed() -> None:
    data = timed_raw(interactions_with_times(30, seed=2), TRIPLES)
    by_time, meta = assemble(data, SplitOptions(method="time"))
    assert meta["split"]["method"] == "per_user_by_timestamp"
    rows = by_time["interactions.parquet"].collect().join(data.interactions.collect(), on=["user", "item"])
    order = {"train": 0, "valid": 1, "test": 2}
    newest = rows.group_by("user", "split").agg(pl.col("timestamp").max().alias("newest"), pl.col("timestamp").min().alias("oldest"))
    for user in range(30):
        mine = {r["split"]: r for r in newest.filter(pl.col("user") == user).iter_rows(named=True)}
        parts = sorted(mine, key=order.get)
        for earlier, later in zip(parts, parts[1:], strict=False):
            assert mine[earlier]["newest"] <= mine[later]["oldest"]  # ties may straddle a cut
    first, _ = assemble(data, SplitOptions(method="random", seed=4))
    again, _ = assemble(data, SplitOptions(method="random", seed=4))
    other, _ = assemble(data, SplitOptions(method="random", seed=5))
    assert table(first, "interactions.parquet").equals(table(again, "interactions.parquet"))
    assert not table(first, "interactions.parquet").equals(table(other, "interactions.parquet"))
    assert not table(first, "interactions.parquet").equals(table(by_time, "interactions.parquet"))
