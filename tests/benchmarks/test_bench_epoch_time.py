"""benchmarks/bench_epoch_time.py: both widths train side by side (pinned, cores swapped) or one
after the other, the ratio is of the medians, the section is written, bad input is one line and
exit status 2."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from benchmarks.bench_epoch_time import Pair, core_pairs, main, report


def test_pairs_take_two_cores_and_swap_them():
    pairs = core_pairs(3, sequential=False)
    if len(os.sched_getaffinity(0)) < 2:
        assert pairs == [(None, None)] * 3
        return
    first, second = sorted(os.sched_getaffinity(0))[:2]
    assert pairs == [(first, second), (second, first), (first, second)]
    assert core_pairs(2, sequential=True) == [(None, None), (None, None)]


def test_ratio_is_of_the_medians_and_the_report_names_the_spread():
    pairs = [
        Pair("kgat", {32: 0, 2: 1}, {32: [1.0, 2.0, 1.0], 2: [1.2, 1.3, 9.0]}),
        Pair("kgat", {32: 1, 2: 0}, {32: [2.0, 2.0, 2.0], 2: [3.0, 3.0, 3.0]}),
    ]
    assert pairs[0].ratio(2) == pytest.approx(1.3)
    args = argparse.Namespace(bits=2, warmup=2, epochs=3, sequential=False)
    text = report("tiny", args, pairs)
    assert "| kgat | 0 / 1 | 1.000 | 1.300 | 1.300 |" in text
    assert "kgat INT2 / FP32 epoch time: **1.40** (median of 2 pairs, 1.30 to 1.50" in text


@pytest.mark.parametrize("mode", [[], ["--sequential"]])
def test_times_both_widths_and_writes_its_section(
    mode, tiny_dataset_dir: Path, tmp_path: Path, monkeypatch, capsys
):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    argv = ["--dataset", str(tiny_dataset_dir), "--models", "bprmf", "--warmup", "0",
            "--epochs", "2", "--repeats", "1", *mode]  # fmt: skip
    assert main(argv) == 0
    text = md.read_text()
    assert "<!-- begin:epoch-time-cpu -->" in text
    row = next(line for line in text.splitlines() if line.startswith("| bprmf |"))
    fp32, int2, ratio = (float(cell) for cell in row.strip("|").split("|")[2:5])
    # the table's seconds have three decimals: the ratio (of unrounded medians) agrees to that
    assert fp32 > 0 and int2 > 0
    assert ratio == pytest.approx(int2 / fp32, rel=1e-3 / min(fp32, int2) + 1e-3)
    assert ("one after the other" in text) == bool(mode)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bits", "32"], "--bits needs a compressed width"),
        (["--epochs", "0"], "--epochs needs to be at least 1 (got 0)"),
        (["--repeats", "0"], "--repeats needs to be at least 1 (got 0)"),
        (["--dataset", "no-such-dataset"], "dataset 'no-such-dataset'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
