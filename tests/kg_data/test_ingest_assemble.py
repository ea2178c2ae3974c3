"""assemble: deduplication rules, id-space sizing and the counts written to metadata.json."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kg_data.assemble import _distinct_triples, assemble
from kg_data.errors import KGDataError
from kg_data.schema import RawData


def raw(interactions: list[tuple], triples: list[tuple], **kwargs: object) -> RawData:
    inter = pl.DataFrame(interactions, schema={"user": pl.Int64, "item": pl.Int64, "split": pl.String}, orient="row")
    return RawData(
        source_format="test",
        interactions=inter.with_columns(timestamp=pl.lit(None, pl.Float64)),
        triples=pl.DataFrame(triples, schema={"head": pl.Int64, "relation": pl.Int64, "tail": pl.Int64}, orient="row"),
        sources=[Path("x.txt")],
        **kwargs,
    )


def test_given_splits_dedup_within_and_across_splits() -> None:
    data = raw(
        [(0, 1, "test"), (0, 1, "train"), (0, 1, "train"), (1, 2, "valid"), (1, 2, "test"), (1, 3, "test")],
        [(0, 0, 4), (0, 0, 4), (1, 0, 4)],
    )
    tables, meta = assemble(data, (0.8, 0.1, 0.1), seed=0)
    rows = tables["interactions.parquet"].rows()
    assert rows == [(0, 1, "train"), (1, 2, "valid"), (1, 3, "test")]  # each pair in its earliest split
    assert meta["dropped"] == {"duplicate_interactions": 1, "interactions_repeated_across_splits": 2, "duplicate_triples": 1}
    assert meta["n_interactions"] == {"train": 1, "valid": 1, "test": 1}
    assert meta["split"] == {"method": "given"}


def test_clean_given_splits_keep_the_raw_order() -> None:
    data = raw([(1, 0, "train"), (0, 2, "train"), (0, 1, "test")], [(0, 0, 3)])
    tables, meta = assemble(data, (0.8, 0.1, 0.1), seed=0)
    assert tables["interactions.parquet"].rows() == [(1, 0, "train"), (0, 2, "train"), (0, 1, "test")]
    assert meta["dropped"]["duplicate_interactions"] == 0


def test_id_spaces_take_the_larger_of_side_files_and_ids_seen() -> None:
    data = raw([(0, 1, "train"), (4, 0, "test")], [(0, 0, 9), (1, 2, 5)], n_users=2, n_items=3, n_entities=6, n_relations=5)
    tables, meta = assemble(data, (0.8, 0.1, 0.1), seed=0)
    assert (meta["n_users"], meta["n_items"], meta["n_entities"], meta["n_relations"]) == (5, 3, 10, 5)
    assert tables["users.parquet"]["id"].to_list() == [0, 1, 2, 3, 4]
    assert tables["users.parquet"]["name"].null_count() == 5
    assert meta["n_kg_entities"] == 4  # 0, 1, 5, 9
    assert meta["n_items_with_triples"] == 2  # items 0 and 1 (item 2 has none)
    assert meta["reported"]["items_without_triples"] == 1
    assert meta["reported"]["users_without_interactions"] == 3  # users 1, 2, 3
    assert meta["reported"]["interactions_with_items_without_triples"] == 0


def test_names_fill_the_id_tables_where_known() -> None:
    names = {"items": pl.DataFrame({"id": [2, 0], "name": ["c", "a"]})}
    tables, _ = assemble(raw([(0, 1, "train")], [(0, 0, 3)], n_items=3, names=names), (0.8, 0.1, 0.1), seed=0)
    assert tables["items.parquet"].rows() == [(0, "a"), (1, None), (2, "c")]
    assert tables["items.parquet"].schema == {"id": pl.Int32, "name": pl.String}


def test_missing_splits_are_made_per_user_after_dedup() -> None:
    pairs = [(u, i, None) for u in range(3) for i in range(10)] + [(0, 0, None)]
    tables, meta = assemble(raw(pairs, [(0, 0, 10)]), (0.8, 0.1, 0.1), seed=0)
    assert meta["dropped"]["duplicate_interactions"] == 1
    assert meta["n_interactions"] == {"train": 24, "valid": 3, "test": 3}
    assert meta["split"]["method"] == "per_user_random"
    assert tables["interactions.parquet"].schema == {"user": pl.Int32, "item": pl.Int32, "split": pl.String}


def test_triples_too_large_to_pack_still_dedup() -> None:
    big = 2**31 - 1
    triples = pl.DataFrame({"head": [big, big, 0], "relation": [7, 7, 0], "tail": [big - 1, big - 1, big]})
    assert _distinct_triples(triples).rows() == [(big, 7, big - 1), (0, 0, big)]


def test_sparse_ids_are_refused_before_allocating_for_them() -> None:
    data = raw([(0, 0, "train"), (1, 1, "test")], [(0, 0, 2_000_000_000), (1, 0, 5)])
    with pytest.raises(KGDataError, match="entities ids reach 2,000,000,000 but only 4 rows mention any"):
        assemble(data, (0.8, 0.1, 0.1), seed=0)


def test_a_large_declared_id_space_is_not_sparse() -> None:
    data = raw([(0, 0, "train")], [(0, 0, 1_500_000)], n_entities=2_000_000)
    _, meta = assemble(data, (0.8, 0.1, 0.1), seed=0)
    assert meta["n_entities"] == 2_000_000


@pytest.mark.parametrize(("interactions", "triples", "message"), [([], [(0, 0, 1)], "no interactions"), ([(0, 0, "train")], [], "no triples")])
def test_empty_data_is_refused(interactions: list, triples: list, message: str) -> None:
    with pytest.raises(KGDataError, match=message):
        assemble(raw(interactions, triples), (0.8, 0.1, 0.1), seed=0)
