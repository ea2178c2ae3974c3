"""benchmarks/_datasets.py: a shared dataset is ingested once, re-ingested when its raw files change,
used as cached where the raw files are absent, and refused with one line when neither exists."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks._datasets import DatasetUnavailable, prepare_dataset, resolve_dataset


def test_ingests_once_and_follows_the_raw_files(tiny_raw_dir: Path, tmp_path: Path):
    raw_root, cache = tmp_path / "raw", tmp_path / "cache"
    shutil.copytree(tiny_raw_dir, raw_root / "tiny")
    path = prepare_dataset("tiny", cache_root=cache, raw_root=raw_root)
    assert path == cache / "tiny" and (path / "metadata.json").is_file()
    stamp = (path / "metadata.json").stat().st_mtime_ns
    assert prepare_dataset("tiny", cache_root=cache, raw_root=raw_root) == path
    assert (path / "metadata.json").stat().st_mtime_ns == stamp  # reused, not re-ingested

    train = raw_root / "tiny" / "train.txt"
    lines = train.read_text().splitlines()
    train.write_text("\n".join(lines[:-1]) + "\n")  # one user fewer: another dataset
    prepare_dataset("tiny", cache_root=cache, raw_root=raw_root)
    assert (path / "metadata.json").stat().st_mtime_ns != stamp

    shutil.rmtree(raw_root / "tiny")  # e.g. a GPU machine given only the cache
    assert prepare_dataset("tiny", cache_root=cache, raw_root=raw_root) == path


def test_neither_raw_nor_cache_is_refused(tmp_path: Path):
    with pytest.raises(DatasetUnavailable, match=r"no raw dir at .* and no ingested copy at"):
        prepare_dataset("absent", cache_root=tmp_path / "cache", raw_root=tmp_path / "raw")


def test_an_ingested_dir_stands_in_for_a_name(tiny_dataset_dir: Path):
    assert resolve_dataset(str(tiny_dataset_dir)) == (tiny_dataset_dir.name, tiny_dataset_dir)
