"""writer: the dir appears whole or not at all; overwrite swaps safely; digests are right."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import polars as pl
import pytest

from kg_data.errors import KGDataError
from kg_data.writer import check_destination, file_digest, write_dataset

TABLES = {"a.parquet": pl.DataFrame({"x": [1, 2]}), "b.parquet": pl.DataFrame({"y": ["p"]})}


def test_writes_tables_and_metadata(tmp_path: Path) -> None:
    write_dataset(tmp_path / "out", TABLES, {"k": 1}, overwrite=False)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.parquet", "b.parquet", "metadata.json"]
    assert pl.read_parquet(tmp_path / "out" / "a.parquet")["x"].to_list() == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_creates_missing_parent_dirs(tmp_path: Path) -> None:
    write_dataset(tmp_path / "data" / "deep" / "out", TABLES, {}, overwrite=False)
    assert (tmp_path / "data" / "deep" / "out" / "metadata.json").is_file()


def test_overwrite_puts_the_old_dir_back_when_the_swap_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    write_dataset(out, TABLES, {"version": "old"}, overwrite=False)
    real_rename = os.rename

    def failing_rename(src: os.PathLike, dst: os.PathLike) -> None:
        if ".tmp-" in str(src):
            raise OSError("rename failed")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", failing_rename)
    with pytest.raises(OSError, match="rename failed"):
        write_dataset(out, TABLES, {"version": "new"}, overwrite=True)
    assert '"old"' in (out / "metadata.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_check_destination_rules(tmp_path: Path) -> None:
    check_destination(tmp_path / "absent", overwrite=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(KGDataError, match="already exists"):
        check_destination(empty, overwrite=False)
    check_destination(empty, overwrite=True)  # an empty dir may be replaced
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(KGDataError, match="is not a directory"):
        check_destination(a_file, overwrite=True)


def test_file_digest_matches_hashlib(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    payload = os.urandom(3 * (1 << 20) + 17)  # spans several read chunks
    path.write_bytes(payload)
    assert file_digest(path) == {"sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload)}
