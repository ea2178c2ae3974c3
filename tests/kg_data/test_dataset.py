"""KGDataset: opening checks, lazy frames and arrays that agree with the metadata, fingerprint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kg_data import KGDataset
from kg_data.errors import KGDataError


def test_counts_agree_with_the_frames(tiny_dataset_dir: Path) -> None:
    ds = KGDataset.open(tiny_dataset_dir)
    assert (ds.n_users, ds.n_items, ds.n_entities, ds.n_relations) == (200, 300, 900, 6)
    assert ds.triples().collect().height == ds.n_triples
    for split in ("train", "valid", "test"):
        pairs = ds.pairs(split)
        assert pairs.dtype == np.int64 and pairs.shape == (ds.n_interactions(split), 2)
        assert ds.interactions(split).collect()["split"].unique().to_list() == [split]
    assert ds.n_interactions() == ds.interactions().collect().height == len(ds.pairs())
    assert ds.triples_array().shape == (ds.n_triples, 3) and ds.triples_array().dtype == np.int64
    assert isinstance(ds.interactions(), pl.LazyFrame)
    assert ds.stats()["interactions (train)"] == ds.n_interactions("train")
    assert "users=200" in repr(ds)


def test_split_name_is_checked(tiny_dataset_dir: Path) -> None:
    ds = KGDataset.open(tiny_dataset_dir)
    with pytest.raises(KGDataError, match="'split' needs to be one of train, valid, test"):
        ds.interactions("dev")


def test_pairs_of_an_empty_split_have_shape_zero_by_two(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train.txt").write_text("0 1 2\n")
    (raw / "test.txt").write_text("0 3\n")
    (raw / "kg_final.txt").write_text("1 0 4\n")
    from kg_data import ingest

    ds = KGDataset.open(ingest(raw, tmp_path / "out", progress=False).path)
    assert ds.pairs("valid").shape == (0, 2)


def test_fingerprint_is_stable_and_follows_the_content(tmp_path: Path, tiny_dataset_dir: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tiny_dataset_dir, copy)
    original = KGDataset.open(tiny_dataset_dir).fingerprint
    assert KGDataset.open(copy).fingerprint == original  # same bytes, same fingerprint
    triples = pl.read_parquet(copy / "triples.parquet")
    triples.with_columns(pl.col("tail").reverse()).write_parquet(copy / "triples.parquet")
    assert KGDataset.open(copy).fingerprint != original


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "metadata.json").unlink(), "is not a dataset dir \\(no metadata.json\\)"),
        (lambda d: (d / "metadata.json").write_text("{oops"), "not valid JSON"),
        (lambda d: (d / "metadata.json").write_text(json.dumps({"format_version": 99})), "format_version 99"),
        (lambda d: (d / "triples.parquet").unlink(), "lacks triples.parquet"),
    ],
)
def test_open_refuses_dirs_that_ingest_did_not_write(tmp_path: Path, tiny_dataset_dir: Path, damage, message: str) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_dataset_dir, broken)
    damage(broken)
    with pytest.raises(KGDataError, match=message):
        KGDataset.open(broken)


def test_open_refuses_a_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(KGDataError, match="no such dataset dir; create one with: python -m pipelines.ingest"):
        KGDataset.open(tmp_path / "absent")
