"""benchmarks/bench_offload.py: both modes train the same seed in turns, the offloaded tables give
the on-device accuracy, the report's ratios are of the runs' own figures, bad input is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.bench_offload import main, parse_args, report


def _metrics(recall: float, seconds: list[float], peak: int, offload: bool) -> dict:
    on_host = 30 * 2**20 if offload else 0
    return {
        "recall@20": recall,
        "ndcg@20": recall / 2,
        "epoch_seconds": seconds,
        "peak_rss_bytes": peak,
        "cuda_max_memory_allocated": None,
        "row_tables": {
            "memory": {
                "device_tables": 0 if offload else 10 * 2**20,
                "device_optimizer": 0 if offload else 20 * 2**20,
                "host_tables": on_host // 3,
                "host_optimizer": 2 * on_host // 3,
                "host_index": 0,
            },
            "stats": {"node_embedding": {"hits": 90, "misses": 10} if offload else {}, "all": {}},
        },
    }


def test_the_report_pairs_rounds_and_compares_peaks():
    runs = {
        "on device": [_metrics(0.1, [2.0, 4.0], 400 * 2**20, False), _metrics(0.1, [2.0], 300 * 2**20, False)],
        "offloaded": [_metrics(0.1, [3.0], 200 * 2**20, True), _metrics(0.12, [5.0], 100 * 2**20, True)],
    }  # fmt: skip
    args = parse_args(["--device", "cpu", "--rounds", "2", "--max-batches", "7"])
    text = report(runs, "tiny", args)
    assert (
        "| on device | 0.1000 / 0.1000 | 0.0500 / 0.0500 | 2.50 | 400.0 | 30.0 | 0.0 | n/a |"
        in text
    )
    assert (
        "| offloaded | 0.1000 / 0.1200 | 0.0500 / 0.0600 | 4.00 | 200.0 | 0.0 | 30.0 | 90 / 10 |"
        in text
    )
    # medians 4.0 / 2.5; rounds 3/3 and 5/2
    assert "epoch time: **1.60** (per round 1.00, 2.50)" in text
    assert "process peak, on device / offloaded: **2.00x**" in text
    assert "difference between the modes in a round: 0.0200" in text
    assert "the first 7 CF batches" in text


def test_both_modes_train_to_the_same_accuracy(tiny_dataset_dir: Path, tmp_path: Path, monkeypatch):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    argv = ["--dataset", str(tiny_dataset_dir), "--model", "lightgcn", "--max-batches", "2",
            "--rounds", "1", "--device", "cpu"]  # fmt: skip
    assert main(argv) == 0
    text = md.read_text()
    assert "<!-- begin:offload-tiny-cpu -->" in text
    assert "difference between the modes in a round: 0.0000" in text
    offloaded = next(line for line in text.splitlines() if line.startswith("| offloaded |"))
    assert offloaded.split("|")[6].strip() == "0.0"  # nothing of the tables on the device


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds", "0"], "--rounds must be at least 1 (got 0)"),
        (["--max-batches", "-1"], "--max-batches must be 0 (all) or more"),
    ],
)
def test_bad_arguments_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_a_missing_dataset_is_one_line_and_exit_2(capsys):
    assert main(["--dataset", "no-such-dataset", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no-such-dataset" in err and len(err.splitlines()) == 1


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the message torch gives without a GPU"
)
def test_cuda_without_a_gpu_is_one_line_and_exit_2(capsys):
    assert main(["--device", "cuda"]) == 2
    assert "--device cuda needs a CUDA GPU" in capsys.readouterr().err
