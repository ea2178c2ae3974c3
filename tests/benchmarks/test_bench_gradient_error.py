"""benchmarks/bench_gradient_error.py: exact steps agree, wider settings err less, the section is
written, and bad input is one line with exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_gradient_error import SETTINGS, main, measure


def test_errors_shrink_with_width_and_the_protected_tensors(tiny_dataset_dir: Path):
    fp32_bytes, results = measure(tiny_dataset_dir, "kgat", draws=2)
    error = {setting.label: value for setting, value, _ in results}
    held = {setting.label: value for setting, _, value in results}
    assert [setting for setting, _, _ in results] == list(SETTINGS)
    assert error["INT8"] < error["INT4"] < error["INT2, every tensor at 2 bits"]
    assert error["INT2 (defaults: both)"] < error["INT2, every tensor at 2 bits"]
    assert held["INT2, every tensor at 2 bits"] < held["INT2 (defaults: both)"] < fp32_bytes


def test_writes_its_section(tiny_dataset_dir: Path, tmp_path: Path, monkeypatch, capsys):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    assert main(["--dataset", str(tiny_dataset_dir), "--model", "lightgcn", "--draws", "1"]) == 0
    text = md.read_text()
    assert "<!-- begin:gradient-error-tiny-cpu -->" in text  # the dataset dir is named tiny
    assert "| INT2 (defaults: both) | 2 | 8 | 4 |" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--draws", "0"], "--draws needs to be a positive integer (got 0)"),
        (["--dataset", "no-such-dataset"], "dataset 'no-such-dataset'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
