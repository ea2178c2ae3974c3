"""Aggregate `bench_distributed` runs: N workers against one, per (dataset, model), over seeds.

Per (dataset, model, workers): test Recall@20 / NDCG@20 mean ± sample std over seeds and the mean
epoch seconds (rank 0's, epochs after the first); per dataset and model: the per-seed difference
N - 1 of test Recall@20 with its 95% Student-t interval (same seed = same initial weights, batches
and negatives, so the pair isolates the data parallelism), the speed-up T1 / TN and the scaling
efficiency T1 / (N * TN).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks._accuracy_report import epoch_seconds, mean_std
from benchmarks._report import markdown_table, width_label
from benchmarks._stats import t_quantile


@dataclass(frozen=True)
class Run:
    """One finished run and its metrics.json."""

    dataset: str
    model: str
    bits: int
    seed: int
    workers: int
    metrics: dict[str, Any]


def t_interval(differences: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of the 95% Student-t interval) of paired differences (needs >= 2)."""
    n = len(differences)
    mean = statistics.fmean(differences)
    if n < 2:
        return mean, math.inf
    t = t_quantile(n - 1)
    return mean, t * statistics.stdev(differences) / math.sqrt(n)


def group(runs: Sequence[Run]) -> dict[tuple[str, str, int], dict[int, dict[int, dict]]]:
    """(dataset, model, bits) -> workers -> seed -> metrics."""
    grid: dict[tuple[str, str, int], dict[int, dict[int, dict]]] = {}
    for run in runs:
        cell = grid.setdefault((run.dataset, run.model, run.bits), {})
        cell.setdefault(run.workers, {})[run.seed] = run.metrics
    return grid


def pair_line(
    dataset: str, model: str, bits: int, by_workers: dict[int, dict[int, dict]]
) -> list[str]:
    """The verdict lines of one (dataset, model): paired Recall@20 difference and the scaling."""
    lines = []
    one = by_workers.get(1, {})
    for workers, seeds in sorted(by_workers.items()):
        if workers == 1:
            continue
        paired = sorted(set(one) & set(seeds))
        label = f"{dataset} {model} {width_label(bits)}"
        if len(paired) >= 2:
            mean, half = t_interval([seeds[s]["recall@20"] - one[s]["recall@20"] for s in paired])
            verdict = "contains 0" if abs(mean) <= half else "excludes 0"
            lines.append(
                f"- {label}, {workers} workers - 1, test Recall@20 over {len(paired)} paired seeds: "
                f"**{mean:+.4f} ± {half:.4f}** (95% t interval; {verdict})"
            )
        if one and seeds:
            t1 = statistics.fmean(epoch_seconds(m) for m in one.values())
            tn = statistics.fmean(epoch_seconds(m) for m in seeds.values())
            lines.append(
                f"- {label}: epoch {t1:.2f} s on 1 worker, {tn:.2f} s on {workers}: speed-up "
                f"**{t1 / tn:.2f}x**, scaling efficiency **{t1 / (workers * tn):.2f}**"
            )
    return lines


def results_table(grid: dict[tuple[str, str, int], dict[int, dict[int, dict]]]) -> str:
    rows = []
    for (dataset, model, bits), by_workers in sorted(grid.items()):
        for workers, seeds in sorted(by_workers.items()):
            recall = mean_std([m["recall@20"] for m in seeds.values()])
            ndcg = mean_std([m["ndcg@20"] for m in seeds.values()])
            others = [
                statistics.fmean(m[key][1:] or m[key])
                for m in seeds.values()
                for key in m
                if key.startswith("epoch_seconds_rank")
            ]
            allreduce = [
                statistics.fmean(m["allreduce_seconds"][1:] or m["allreduce_seconds"])
                for m in seeds.values()
                if m.get("allreduce_seconds")
            ]
            rows.append(
                [
                    dataset, model, width_label(bits), workers, len(seeds),
                    f"{recall[0]:.4f} ± {recall[1]:.4f}", f"{ndcg[0]:.4f} ± {ndcg[1]:.4f}",
                    f"{statistics.fmean(epoch_seconds(m) for m in seeds.values()):.2f}",
                    f"{statistics.fmean(others):.2f}" if others else "",
                    f"{statistics.fmean(allreduce):.2f}" if allreduce else "",
                    f"{statistics.fmean(m['epochs_trained'] for m in seeds.values()):.0f}",
                ]
            )  # fmt: skip
    headers = [
        "dataset", "model", "width", "workers", "seeds", "Recall@20", "NDCG@20",
        "epoch s (rank 0)", "epoch s (other ranks)", "all-reduce s (rank 0)", "epochs",
    ]  # fmt: skip
    return markdown_table(headers, rows)


def report(runs: Sequence[Run], note: str = "") -> tuple[str, str, str]:
    """(title, BENCHMARKS.md body, the table printed on the terminal)."""
    grid = group(runs)
    table = results_table(grid)
    lines = [
        line
        for (dataset, model, bits), by_workers in sorted(grid.items())
        for line in pair_line(dataset, model, bits, by_workers)
    ]
    datasets = ", ".join(sorted({d for d, _, _ in grid}))
    body = "\n\n".join(
        part
        for part in (
            "1 worker: `tinykg_train.trainer.train` in one process (what `pipelines.train` runs); "
            "N workers: `pipelines.train --workers N`'s code (Ray Train `TorchTrainer`, gloo, one "
            "CPU and one torch thread per worker, each training on its slice of every global batch "
            "with gradients all-reduced), same global batch size and seed. Test metrics of the best "
            "valid epoch; mean ± sample std over seeds. *epoch s*: mean of each run's epochs after "
            "the first, training only; rank 0's (its all-reduce waits included) and the other "
            "ranks'; *all-reduce s*: of rank 0's epoch, the time in the gradient all-reduces "
            "(waits for the slower rank included). Scaling efficiency = T1 / (N x TN).",
            note,
            "\n".join(lines),
            table,
        )
        if part
    )
    return f"Data-parallel training on Ray Train ({datasets})", body, table
