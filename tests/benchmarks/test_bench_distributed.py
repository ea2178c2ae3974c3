"""benchmarks/bench_distributed.py: the report's paired interval and scaling figures from given runs;
(slow) a tiny 1-vs-2-worker matrix on a private local Ray that writes its section and is read back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks._distributed_report import Run, report, t_interval


def metrics(recall: float, seconds: list[float], rank1: list[float] | None = None) -> dict:
    values = {"recall@20": recall, "ndcg@20": recall / 2, "epoch_seconds": seconds,
              "epochs_trained": len(seconds)}  # fmt: skip
    if rank1 is not None:
        values["epoch_seconds_rank1"] = rank1
        values["allreduce_seconds"] = [s / 5 for s in rank1]
    return values


def test_the_paired_interval_is_students_t_over_the_seed_differences():
    mean, half = t_interval([0.01, 0.03, 0.02])
    assert mean == pytest.approx(0.02)
    assert half == pytest.approx(4.303 * 0.01 / math.sqrt(3))  # t(0.975, 2) * sd / sqrt(n)
    assert t_interval([0.5])[1] == math.inf


def test_the_report_pairs_seeds_and_divides_epoch_times():
    runs = [
        Run("music", "kgcn", 2, 0, 1, metrics(0.20, [9.0, 2.0, 2.0])),
        Run("music", "kgcn", 2, 0, 2, metrics(0.22, [9.0, 1.25, 1.25], [9.0, 1.0, 1.0])),
        Run("music", "kgcn", 2, 1, 1, metrics(0.22, [9.0, 2.0, 2.0])),
        Run("music", "kgcn", 2, 1, 2, metrics(0.22, [9.0, 1.25, 1.25], [9.0, 1.0, 1.0])),
    ]
    title, body, table = report(runs, note="a note")
    assert title == "Data-parallel training on Ray Train (music)"
    half = 12.706 * math.sqrt(0.0002) / math.sqrt(2)  # differences +0.02 and 0
    assert f"over 2 paired seeds: **+0.0100 ± {half:.4f}** (95% t interval; contains 0)" in body
    assert (
        "epoch 2.00 s on 1 worker, 1.25 s on 2: speed-up **1.60x**, scaling efficiency **0.80**"
        in body
    )
    assert (
        "| music | kgcn | INT2 | 2 | 2 | 0.2200 ± 0.0000 | 0.1100 ± 0.0000 | 1.25 | 1.00 | 0.20 | 3 |"
        in table
    )
    assert "a note" in body and table in body


@pytest.mark.slow  # a private local Ray and two 2-worker runs: about 2 minutes on 2 cores
def test_a_tiny_matrix_trains_on_one_and_two_workers_and_is_read_back(
    tiny_dataset_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from benchmarks.bench_distributed import main

    md, out = tmp_path / "BENCHMARKS.md", tmp_path / "runs"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    argv = ["--datasets", str(tiny_dataset_dir), "--models", "bprmf", "--bits", "32",
            "--seeds", "0,1", "--epochs", "2", "--max-batches-per-epoch", "3",
            "--set", "embed_dim=8", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    name = tiny_dataset_dir.name
    runs = {
        str(p.parent.relative_to(out)): json.loads(p.read_text()) for p in out.rglob("metrics.json")
    }
    assert sorted(runs) == [f"{name}/bprmf/fp32/seed{s}/w{n}" for s in (0, 1) for n in (1, 2)]
    assert {r["workers"] for r in runs.values()} == {1, 2}
    for seed in (0, 1):  # BPR-MF without dropout: two workers train what one trains
        one, two = (runs[f"{name}/bprmf/fp32/seed{seed}/w{n}"] for n in (1, 2))
        assert two["train_loss"] == pytest.approx(one["train_loss"], rel=1e-6)
    text = md.read_text()
    assert "<!-- begin:distributed-cpu -->" in text and "2 workers - 1, test Recall@20" in text
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("metrics.json")}
    assert main([*argv, "--no-write"]) == 0  # finished runs are read back, not trained again
    assert stamps == {p: p.stat().st_mtime_ns for p in out.rglob("metrics.json")}
