"""Atomic writes of the run dir's files."""

from __future__ import annotations

import json

import pytest
import yaml

from tinykg_train.run_dir import RunDir, write_atomic, write_json_atomic, write_yaml_atomic


def test_paths_and_create(tmp_path):
    run = RunDir(tmp_path / "a" / "b")
    assert not run.path.exists()
    assert run.create().path.is_dir()
    assert run.metrics == tmp_path / "a" / "b" / "metrics.json"
    assert run.checkpoint.name == "checkpoint.pt"


def test_json_and_yaml_round_trip(tmp_path):
    data = {"recall@20": 0.5, "epoch_seconds": [1.0, 2.0], "model": "kgat"}
    assert json.loads(write_json_atomic(tmp_path / "m.json", data).read_text()) == data
    assert yaml.safe_load(write_yaml_atomic(tmp_path / "c.yaml", data).read_text()) == data


def test_a_failing_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = write_json_atomic(tmp_path / "m.json", {"v": 1})

    def half_then_fail(tmp):
        tmp.write_text('{"v": ')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, half_then_fail)
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]
