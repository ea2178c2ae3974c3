"""benchmarks/bench_epoch_time.py: both widths' epochs take turns in their own worker processes (with
the allocator asked for), the ratio is of the medians, each allocator writes its own section, bad
input is one line and exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.bench_epoch_time import Turns, main, report, take_turns


def test_ratio_is_of_the_medians_and_each_round_is_paired():
    turns = Turns("kgat", {32: [1.0, 2.0, 1.0, 1.0], 2: [1.2, 2.6, 9.0, 1.1]})
    assert turns.round_ratios(2) == pytest.approx([1.2, 1.3, 9.0, 1.1])
    text = report("tiny", 2, warmup=1, results=[turns])
    assert "| kgat | tuned | 1.000 | 1.900 | 1.900 | 1.250 (" in text
    assert "kgat (tuned allocator) INT2 / FP32 epoch time: **1.90**" in text
    assert "then 4 rounds of one epoch per worker process" in text
    assert "same rounds" not in text  # one allocator: nothing to compare


def test_a_cuda_run_reports_each_width_s_device_peak_and_the_gpu_goal():
    turns = Turns("kgat", {32: [1.0, 1.0], 2: [1.2, 1.2]}, peak_bytes={32: 300 * 2**20, 2: 100 * 2**20})
    text = report("tiny", 2, warmup=1, results=[turns], device="cuda")
    assert "| kgat | tuned | 1.000 | 1.200 | 1.200 | 1.200 (1.200 to 1.200) | 300.0 | 100.0 | 3.00x |" in text
    assert "(goal <= 1.25 on a GPU)" in text and "FP32 max allocated MiB" in text
    assert "max allocated" not in report("tiny", 2, warmup=1, results=[Turns("kgat", turns.seconds)])


def test_allocators_timed_in_the_same_rounds_are_compared_per_width():
    tuned = Turns("kgat", {32: [0.8, 0.9], 2: [1.0, 1.2]}, "tuned")
    default = Turns("kgat", {32: [1.0, 1.0], 2: [1.2, 1.2]}, "default")
    text = report("tiny", 2, warmup=1, results=[tuned, default])
    assert "| kgat | glibc default | 1.000 | 1.200 | 1.200 |" in text
    assert (
        "tuned allocator over glibc's default, same rounds: FP32 epoch **0.85x**, INT2 epoch **0.92x**"
        in text
    )


def test_workers_take_turns_and_report_every_epoch(tiny_dataset_dir: Path):
    timed = take_turns("bprmf", 2, str(tiny_dataset_dir), warmup=1, rounds=3,
                       allocators=("tuned", "default"))  # fmt: skip
    assert [turns.allocator for turns in timed] == ["tuned", "default"]
    for turns in timed:
        assert set(turns.seconds) == {32, 2}
        assert all(len(s) == 3 and min(s) > 0 for s in turns.seconds.values())


def test_a_worker_that_fails_is_reported(tmp_path: Path):
    with pytest.raises(RuntimeError, match="epoch-time worker stopped"):
        take_turns("bprmf", 2, str(tmp_path / "missing"), warmup=0, rounds=1)


@pytest.mark.parametrize(
    ("allocator", "said"),
    [
        ("tuned", "| lightgcn | tuned |"),
        ("default", "| lightgcn | glibc default |"),
        ("both", "tuned allocator over glibc's default"),
    ],
)
def test_every_allocator_choice_writes_the_dataset_s_one_section(
    allocator, said, tiny_dataset_dir: Path, tmp_path: Path, monkeypatch
):
    section = "epoch-time-tiny-cpu"  # the dataset dir is named tiny
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    argv = ["--dataset", str(tiny_dataset_dir), "--models", "lightgcn", "--warmup", "1",
            "--rounds", "2", "--allocator", allocator]  # fmt: skip
    assert main(argv) == 0
    text = md.read_text()
    assert f"<!-- begin:{section} -->" in text and said in text
    assert text.count("<!-- begin:") == 1
    row = next(line for line in text.splitlines() if line.startswith("| lightgcn |"))
    fp32, int2, ratio = (float(cell) for cell in row.strip("|").split("|")[2:5])
    # the table's seconds have three decimals: the ratio (of unrounded medians) agrees to that
    assert fp32 > 0 and int2 > 0
    assert ratio == pytest.approx(int2 / fp32, rel=1e-3 / min(fp32, int2) + 1e-3)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bits", "32"], "--bits needs a compressed width"),
        (["--rounds", "0"], "--rounds needs to be at least 1 (got 0)"),
        (["--warmup", "-1"], "--warmup needs to be at least 0 (got -1)"),
        (["--dataset", "no-such-dataset"], "dataset 'no-such-dataset'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    _assert_one_line_error(argv, message, capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message torch gives without a GPU")
def test_cuda_without_a_gpu_is_one_line_and_exit_2(capsys):
    _assert_one_line_error(["--device", "cuda"], "--device cuda needs a CUDA GPU", capsys)


@pytest.mark.cuda
def test_cuda_workers_take_turns_and_report_their_device_peaks(tiny_dataset_dir: Path):
    (timed,) = take_turns("lightgcn", 2, str(tiny_dataset_dir), warmup=1, rounds=2, device="cuda")
    assert all(len(s) == 2 and min(s) > 0 for s in timed.seconds.values())
    assert timed.peak_bytes is not None and min(timed.peak_bytes.values()) > 0


def _assert_one_line_error(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
