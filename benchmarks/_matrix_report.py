"""Aggregate the accuracy matrix: per (dataset, mode, model, width) over seeds, against FP32.

A width "holds" FP32's accuracy only when the paired interval says so: per seed, the width's test
Recall@20 minus FP32's of the same seed (same initial weights, batches and negatives, so only the
compression differs); the two-sided 95% Student-t interval of the mean difference, divided by FP32's
mean Recall@20, gives the interval of the ratio. Within 1%: its lower end >= 0.99. Below 1%: its
upper end < 0.99. Otherwise the seeds cannot tell (a wider interval than the effect).

Epoch time ratios use only the rounds in which both widths ran an epoch, one after the other
(`benchmarks.bench_matrix` records them): the median of the per-round ratios.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._report import markdown_table
from benchmarks._stats import t_quantile

FP32 = "32"
CONTROL = "aa"  # the A/A control: the INT2 code path storing nothing quantized (bench_matrix)
WITHIN = 0.99  # "within 1%": the ratio's interval lies at or above this


def width_label(width: str) -> str:
    """FP32, INT2, AUTO: how tables name a width."""
    if width == CONTROL:
        return "A/A"
    return "FP32" if width == FP32 else "AUTO" if width == "auto" else f"INT{width}"


def width_order(width: str) -> float:
    """FP32 first, its A/A control next, then the fixed widths from wide to narrow, then adaptive
    ones."""
    if width == CONTROL:
        return -99.0
    return -100.0 if width == FP32 else -float(width) if width.isdigit() else 100.0


@dataclass(frozen=True)
class Key:
    dataset: str
    mode: str
    model: str
    width: str


@dataclass
class Cell:
    """The finished seeds of one matrix cell, and the same-round epoch times against FP32."""

    runs: dict[int, dict[str, Any]] = field(default_factory=dict)  # seed -> metrics.json
    round_ratios: list[float] = field(default_factory=list)  # this width's epoch / FP32's

    def values(self, key: str) -> list[float]:
        return [float(self.runs[s][key]) for s in sorted(self.runs)]

    def mean(self, key: str) -> float:
        return statistics.fmean(self.values(key))

    def std(self, key: str) -> float:
        values = self.values(key)
        return statistics.stdev(values) if len(values) > 1 else 0.0

    def mean_of(self, key: str) -> float | None:
        values = [m.get(key) for m in self.runs.values()]
        values = [float(v) for v in values if v is not None]
        return statistics.fmean(values) if values else None


@dataclass(frozen=True)
class Interval:
    """The ratio of a width's mean metric to FP32's, with the paired 95% interval over seeds."""

    ratio: float
    low: float
    high: float
    seeds: int

    @property
    def verdict(self) -> str:
        if self.seeds < 2:
            return "one seed"
        if self.low >= WITHIN:
            return "yes"
        if self.high < WITHIN:
            return "no"
        return "unclear"

    def text(self) -> str:
        if self.seeds < 2:
            return f"{self.ratio:.3f}"
        return f"{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}]"


def paired_interval(cell: Cell, base: Cell, key: str) -> Interval | None:
    """Ratio of means and its interval from the per-seed differences (seeds both cells have)."""
    seeds = sorted(set(cell.runs) & set(base.runs))
    if not seeds:
        return None
    base_mean = statistics.fmean(float(base.runs[s][key]) for s in seeds)
    if base_mean <= 0:
        return None
    diffs = [float(cell.runs[s][key]) - float(base.runs[s][key]) for s in seeds]
    mean = statistics.fmean(diffs)
    half = (
        t_quantile(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
        if len(diffs) > 1
        else 0.0
    )
    return Interval(
        1 + mean / base_mean,
        1 + (mean - half) / base_mean,
        1 + (mean + half) / base_mean,
        len(seeds),
    )


def same_round_ratios(rounds: Sequence[dict[str, float]], width: str) -> list[float]:
    """Per round in which both ran: `width`'s epoch seconds over FP32's."""
    return [r[width] / r[FP32] for r in rounds if width in r and FP32 in r and r[FP32] > 0]


def mib(value: float | None) -> str:
    return "" if value is None else f"{value / 2**20:.1f}"


def cell_row(key: Key, cell: Cell, base: Cell | None) -> list[object]:
    compared = base is not None and key.width != FP32
    recall = paired_interval(cell, base, "recall@20") if compared else None
    ndcg = paired_interval(cell, base, "ndcg@20") if compared else None
    held, base_held = (
        cell.mean_of("activation_bytes"),
        base.mean_of("activation_bytes") if base else None,
    )
    ratios = cell.round_ratios
    epoch = f"{statistics.median(ratios):.2f} ({len(ratios)})" if compared and ratios else ""
    seeds = len(cell.runs)
    return [
        key.dataset, key.mode, key.model, width_label(key.width), seeds,
        f"{cell.mean('recall@20'):.4f} ± {cell.std('recall@20'):.4f}",
        f"{cell.mean('ndcg@20'):.4f} ± {cell.std('ndcg@20'):.4f}",
        recall.text() if recall else "", recall.verdict if recall else "",
        ndcg.text() if ndcg else "",
        mib(held),
        f"{base_held / held:.1f}x" if compared and held and base_held else "",
        mib(cell.mean_of("peak_rss_bytes")),
        epoch,
        f"{cell.mean('best_epoch') + 1:.0f} / {cell.mean('epochs_trained'):.0f}",
    ]  # fmt: skip


HEADERS = [
    "dataset", "mode", "model", "width", "seeds", "Recall@20", "NDCG@20",
    "Recall / FP32 [95% paired]", "within 1%", "NDCG / FP32 [95% paired]", "held MiB",
    "FP32 / held", "peak RSS MiB", "epoch / FP32 (rounds)", "best / ran epochs",
]  # fmt: skip


def results_table(cells: dict[Key, Cell]) -> str:
    keys = sorted(cells, key=lambda k: (k.dataset, k.mode, k.model, width_order(k.width)))
    rows = []
    for key in keys:
        base = cells.get(Key(key.dataset, key.mode, key.model, FP32))
        rows.append(cell_row(key, cells[key], base))
    return markdown_table(HEADERS, rows)


BASE_MODE = "whole"  # the mode every other one is compared with, width for width
MODE_HEADERS = [
    "dataset", "mode", "model", "width", "seeds", "Recall / whole [95% paired]", "within 1%",
    "NDCG / whole [95% paired]", "peak RSS / whole",
]  # fmt: skip


def mode_table(cells: dict[Key, Cell]) -> str:
    """Each cell of a mode other than `BASE_MODE` against the whole-graph cell of the same
    dataset, model and width, paired by seed (the same seed gives both runs the same initial
    weights, batches and negatives, so what differs is the mode): "" when no cell has one."""
    rows = []
    for key in sorted(cells, key=lambda k: (k.dataset, k.mode, k.model, width_order(k.width))):
        base = cells.get(Key(key.dataset, BASE_MODE, key.model, key.width))
        if key.mode == BASE_MODE or base is None:
            continue
        cell = cells[key]
        recall, ndcg = (paired_interval(cell, base, k) for k in ("recall@20", "ndcg@20"))
        if recall is None or ndcg is None:
            continue
        rss, base_rss = cell.mean_of("peak_rss_bytes"), base.mean_of("peak_rss_bytes")
        rows.append([
            key.dataset, key.mode, key.model, width_label(key.width), recall.seeds,
            recall.text(), recall.verdict, ndcg.text(),
            f"{rss / base_rss:.2f}" if rss and base_rss else "",
        ])  # fmt: skip
    return markdown_table(MODE_HEADERS, rows) if rows else ""


def popularity_lines(cells: dict[Key, Cell]) -> list[str]:
    """Per dataset, the most-popular ranking's test Recall@20 that its runs recorded (metrics.json
    `most_popular`, the same test users as the model's): the bar the cells' Recall@20 is read
    against. Runs from before it was recorded are left out; a dataset none of whose runs has it
    gets no line."""
    by_dataset: dict[str, list[float]] = {}
    for key, cell in cells.items():
        for run in cell.runs.values():
            if run.get("most_popular"):
                by_dataset.setdefault(key.dataset, []).append(run["most_popular"]["recall@20"])
    lines = []
    for dataset, values in sorted(by_dataset.items()):
        low, high = min(values), max(values)
        spread = "" if high - low < 5e-5 else f" (runs {low:.4f} to {high:.4f}: sampled users)"
        lines.append(
            f"- {dataset}: the most-popular ranking (items by training count, no model) reads "
            f"test Recall@20 **{statistics.fmean(values):.4f}**{spread} on the same users"
        )
    return lines


def verdict_counts(cells: dict[Key, Cell]) -> dict[str, dict[str, int]]:
    """Per width: how many cells hold (yes), fall short (no) or cannot tell (unclear)."""
    counts: dict[str, dict[str, int]] = {}
    for key, cell in cells.items():
        base = cells.get(Key(key.dataset, key.mode, key.model, FP32))
        if key.width == FP32 or base is None:
            continue
        interval = paired_interval(cell, base, "recall@20")
        if interval is not None:
            tally = counts.setdefault(key.width, {})
            tally[interval.verdict] = tally.get(interval.verdict, 0) + 1
    return counts


def plot(cells: dict[Key, Cell], path: Path) -> Path:
    """One panel per dataset: held MiB (log) against test Recall@20 / FP32's, a line per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    datasets = sorted({k.dataset for k in cells})
    columns = min(3, len(datasets))
    rows = -(-len(datasets) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False)
    colors = plt.get_cmap("tab10")
    models = sorted({k.model for k in cells})
    for ax, dataset in zip(axes.flat, datasets, strict=False):
        for index, model in enumerate(models):
            keys = sorted(
                (
                    k
                    for k in cells
                    if k.dataset == dataset
                    and k.model == model
                    and k.mode == "whole"
                    and k.width != CONTROL  # a control, not a point of the trade-off
                ),
                key=lambda k: width_order(k.width),
            )
            base = cells.get(Key(dataset, "whole", model, FP32))
            if base is None or not keys:
                continue
            points = []
            for key in keys:
                held = cells[key].mean_of("activation_bytes")
                interval = paired_interval(cells[key], base, "recall@20")
                ratio = 1.0 if key.width == FP32 else interval.ratio if interval else None
                if held and ratio is not None:
                    points.append((held / 2**20, ratio, key.width))
            if not points:
                continue
            xs, ys, labels = zip(*points, strict=True)
            ax.plot(
                xs, ys, marker="o", markersize=3, linewidth=0.8, color=colors(index), label=model
            )
            for x, y, label in points:
                ax.annotate(label, (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
        ax.axhline(WITHIN, color="grey", linewidth=0.6, linestyle="--")
        ax.set_xscale("log")
        # within one decade matplotlib labels every minor tick, and the labels run together
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(dataset, fontsize=9)
        ax.set_xlabel("MiB held for backward (log)", fontsize=8)
        ax.set_ylabel("Recall@20 / FP32", fontsize=8)
        ax.grid(alpha=0.3, linewidth=0.5)
        ax.legend(fontsize=7, frameon=False)
    for ax in list(axes.flat)[len(datasets) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
