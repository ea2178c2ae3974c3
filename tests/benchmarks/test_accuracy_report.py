"""benchmarks/_accuracy_report.py: means, sample stds, ratios to FP32, same-seed differences, epoch
times without the first epoch, and the goal verdicts, on hand-made metrics."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from benchmarks._accuracy_report import (
    Run,
    epoch_seconds,
    goal_lines,
    group,
    kernel_backends,
    report,
    results_table,
)
from benchmarks.bench_accuracy import Planned
from tinykg_train.config import TrainConfig


def metrics(recall: float, ndcg: float, seconds: list[float], held: int) -> dict:
    return {"recall@20": recall, "ndcg@20": ndcg, "epoch_seconds": seconds,
            "activation_bytes": held, "best_epoch": 1, "epochs_trained": len(seconds)}  # fmt: skip


RUNS = [
    Run("d", "kgat", 32, 0, metrics(0.30, 0.20, [9.0, 1.0, 1.0], 40 * 2**20)),
    Run("d", "kgat", 32, 1, metrics(0.32, 0.22, [9.0, 1.0, 1.0], 40 * 2**20)),
    Run("d", "kgat", 2, 0, metrics(0.29, 0.19, [9.0, 1.5, 1.5], 4 * 2**20)),
    Run("d", "kgat", 2, 1, metrics(0.30, 0.21, [9.0, 1.5, 1.5], 4 * 2**20)),
    Run("d", "bprmf", 32, 0, metrics(0.20, 0.10, [1.0], 2**20)),
]


def test_epoch_seconds_leave_out_the_first_epoch():
    assert epoch_seconds({"epoch_seconds": [10.0, 2.0, 4.0]}) == 3.0
    assert epoch_seconds({"epoch_seconds": [5.0]}) == 5.0


def test_table_rows():
    table = results_table(group(RUNS)["d"]).splitlines()
    fp32, int2 = table[2], table[3]
    assert fp32.startswith("| kgat | FP32 | 2 | 0.3100 ± 0.0141 | 0.2100 ± 0.0141 |  |")
    # ratio of the means 0.295 / 0.31; same-seed differences -0.01 and -0.02
    assert "| 0.952 | 0.952 | -0.0150 ± 0.0071 | 1.50 | 1.50 | 4.00 | 10.0x | 2 / 3 |" in int2
    assert math.isclose(0.295 / 0.31, 0.9516, abs_tol=1e-4)


def test_one_seed_shows_no_spread():
    table = results_table(group(RUNS[:1] + RUNS[2:3])["d"]).splitlines()
    assert table[2].startswith("| kgat | FP32 | 1 | 0.3000 | 0.2000 |")
    assert "| 0.967 | 0.950 | -0.0100 | 1.50 |" in table[3]


@pytest.mark.parametrize("device_type", ["cpu", "cuda"], ids=["on-cpu", "on-gpu"])
def test_goal_verdicts(device_type: str):
    lines = goal_lines(group(RUNS)["d"], device_type)
    assert lines[0] == "- KGAT INT2 / FP32 test Recall@20: **0.952** (goal >= 0.99: MISSED)"
    if device_type == "cpu":
        assert lines[1] == "- KGAT INT2 / FP32 epoch time: **1.50** (goal <= 1.10 on CPU: MISSED)"
    else:
        assert lines[1].endswith("(the <= 1.10 goal is for the CPU)")
    assert lines[2] == (
        "- KGAT vs BPR-MF at FP32, test Recall@20: **0.3100 vs 0.2000** (goal: KGAT higher: met)"
    )


def test_a_report_without_goals_or_note_has_no_empty_paragraphs():
    runs = [RUNS[4]]  # BPR-MF alone: no goal applies
    configs = {Planned("d", "bprmf", 32, 0, Path("runs")): TrainConfig(model="bprmf")}
    title, body, tables = report(runs, configs, "accuracy-d-cpu", torch.device("cpu"), figures=None)
    assert title == "Accuracy per bit width (d; CPU)"
    assert "| bprmf | FP32 | 1 | 0.2000 | 0.1000 |" in tables
    assert "\n\n\n" not in body and body.count("### d") == 1
    assert "Kernel backends" not in body  # these metrics predate the record: no line


def test_the_kernel_backends_the_runs_recorded_are_listed():
    recorded = {"kernels_backends": {"quantize": {"cpu-native": 9, "torch": 2}}}
    runs = [
        Run("d", "kgat", 2, 0, {**RUNS[0].metrics, **recorded}),
        Run("d", "kgat", 32, 0, {**RUNS[0].metrics, "kernels_backends": {}}),
    ]
    assert kernel_backends(runs) == "cpu-native (1 of 2 runs), torch (1 of 2 runs)"
