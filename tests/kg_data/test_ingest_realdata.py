"""The three shared datasets ingest to the counts of ../shared/data/README.md (skipped without them).

Which count is which: `users`, `items`, `relations` are id-space sizes; `interactions` are distinct
(user, item) pairs (after dropping KGCN's sampled negatives); `triples` are distinct triples;
`entities` in the README table are the distinct entities that occur in a triple (`n_kg_entities`).
`n_entities`, the entity id space, is larger for ml-100k: its 84 items without a KG link are
entities too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kg_data import KGDataset, ingest

pytestmark = pytest.mark.realdata

EXPECTED = {
    "lfm1m-kgat": {
        "n_users": 5941, "n_items": 10303, "n_relations": 6, "n_triples": 70953, "n_kg_entities": 27580, "n_entities": 27580,
        "n_interactions": {"train": 738345, "valid": 103187, "test": 217212},
    },
    "music-kgcn": {
        "n_users": 1872, "n_items": 3846, "n_relations": 60, "n_triples": 15518, "n_kg_entities": 9366, "n_entities": 9366,
        "n_interactions_total": 21173,
    },
    "ml-100k-recbole": {
        "n_users": 943, "n_items": 1682, "n_relations": 24, "n_triples": 91631, "n_kg_entities": 34628, "n_entities": 34712,
        "n_items_with_triples": 1598, "n_interactions_total": 100000,
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts_match_the_readme(shared_data: Path, tmp_path: Path, name: str) -> None:
    info = ingest(shared_data / name, tmp_path / name, progress=False)
    meta = info.metadata
    for key, value in EXPECTED[name].items():
        if key == "n_interactions_total":
            assert sum(meta["n_interactions"].values()) == value
        else:
            assert meta[key] == value, key
    ds = KGDataset.open(info.path)
    assert ds.triples().collect().height == ds.n_triples
    assert len(ds.pairs()) == ds.n_interactions()


def test_lfm1m_quirks_are_counted(shared_data: Path, tmp_path: Path) -> None:
    meta = ingest(shared_data / "lfm1m-kgat", tmp_path / "lfm", progress=False).metadata
    assert meta["reported"]["user_lines_without_items"] == 183  # valid.txt lines holding a user alone
    assert meta["reported"]["entity_ids_beyond_entity_list"] == 0
    assert meta["dropped"] == {
        "duplicate_interactions": 0, "interactions_repeated_across_splits": 0, "duplicate_triples": 0, "interactions_with_items_without_triples": 0,
    }
    assert meta["split"] == {"method": "given", "drop_unlinked_items": False}


def test_music_kgcn_negatives_are_dropped(shared_data: Path, tmp_path: Path) -> None:
    meta = ingest(shared_data / "music-kgcn", tmp_path / "music", progress=False).metadata
    assert meta["dropped"]["negative_samples"] == 21173
    assert meta["split"]["method"] == "per_user_random"


def test_ml100k_split_is_by_timestamp(shared_data: Path, tmp_path: Path) -> None:
    meta = ingest(shared_data / "ml-100k-recbole", tmp_path / "ml", progress=False).metadata
    assert meta["split"]["method"] == "per_user_by_timestamp"
    assert meta["n_interactions"] == {"train": 79926, "valid": 10037, "test": 10037}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_streaming_in_small_pieces_writes_the_same_tables(shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """64 KiB text blocks and ~100k-row buckets on disk give the tables of one block and one bucket."""
    import polars as pl

    from kg_data import buckets
    from kg_data.formats import _text

    whole = ingest(shared_data / name, tmp_path / "whole", progress=False)
    monkeypatch.setattr(_text, "BLOCK_BYTES", 64 << 10)
    monkeypatch.setattr(buckets, "ROWS_PER_BUCKET", 100_000)
    pieces = ingest(shared_data / name, tmp_path / "pieces", progress=False)
    assert pieces.metadata == whole.metadata
    for table in sorted(p.name for p in whole.path.glob("*.parquet")):
        assert pl.read_parquet(pieces.path / table).equals(pl.read_parquet(whole.path / table)), table
