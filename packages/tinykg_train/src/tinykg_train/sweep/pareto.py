"""The memory/quality trade-off of a sweep: the Pareto front and its chart.

A trial is on the front when no other trial uses at most as much activation memory with at least
the same Recall@20 and is strictly better in one of the two. Identical points do not dominate each
other, so all copies of a front point stay on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from tinykg_train.compression_defaults import width_label

WIDTH_COLOURS = {"int1": "tab:red", "int2": "tab:orange", "int4": "tab:green", "int8": "tab:blue",
                 "fp32": "black"}  # fmt: skip
ADAPTIVE_COLOURS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:grey")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


class ChartPoint(Protocol):
    """What the chart reads of a trial (`summary.TrialRow` has it; this module imports no summary,
    which imports `pareto_front` from here)."""

    settings: Mapping[str, str]
    recall: float | None
    popular: float | None  # the most-popular ranking's Recall@20 on the trial's test users
    pareto: bool

    @property
    def activation_mib(self) -> float | None: ...

    @property
    def comparable(self) -> bool: ...


def trial_width(settings: Mapping[str, str]) -> str:
    """How the chart names a trial's width: fp32, int2, ..., auto, or auto with its memory budget
    ("auto <= 300MB") when the trial had one."""
    bits = str(settings["bits"])
    label = width_label(int(bits) if bits.isdigit() else bits)
    budget = settings.get("memory_budget")
    return f"{label} <= {budget}" if budget not in (None, "", "None") else label


def width_order(label: str) -> tuple[int, str]:
    """fp32, int8, int4, int2, int1, then the adaptive ones."""
    fixed = ("fp32", "int8", "int4", "int2", "int1")
    return (fixed.index(label), "") if label in fixed else (len(fixed), label)


def pareto_front(memory: Sequence[float], quality: Sequence[float]) -> list[int]:
    """Indices of the non-dominated points (lower memory, higher quality is better), memory ascending.

    One sort by (memory ascending, quality descending), then a sweep that keeps the best quality
    seen: O(n log n).
    """
    if len(memory) != len(quality):
        raise ValueError(
            f"memory and quality need the same length ({len(memory)} != {len(quality)})"
        )
    order = sorted(range(len(memory)), key=lambda i: (memory[i], -quality[i]))
    front: list[int] = []
    best_quality, best_memory = float("-inf"), None
    for index in order:
        if quality[index] > best_quality:
            front.append(index)
            best_quality, best_memory = quality[index], memory[index]
        elif quality[index] == best_quality and memory[index] == best_memory:
            front.append(index)  # an exact copy of the point that set the best quality
    return front


def popularity_line(points: Sequence[ChartPoint]) -> float | None:
    """The most-popular ranking's test Recall@20 when every point has the same one (one dataset,
    the same test users), else None: a line drawn for trials on other data would mislead."""
    values = {point.popular for point in points}
    if len(values) != 1 or None in values:
        return None
    return values.pop()


def pareto_chart(rows: Sequence[ChartPoint], path: Path, title: str) -> Path | None:
    """Activation MiB vs test Recall@20: colour = width (fp32, int2, auto, auto with its memory
    budget), marker = model, the front as a dashed step line, the most-popular ranking's Recall@20
    as a dotted line when the trials share it (`popularity_line`).

    Returns None (and writes nothing) when no trial finished with both numbers.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    points = [row for row in rows if row.comparable]
    if not points:
        return None
    widths = sorted({trial_width(row.settings) for row in points}, key=width_order)
    models = sorted({row.settings["model"] for row in points})
    adaptive = iter(ADAPTIVE_COLOURS * len(widths))
    colour = {w: WIDTH_COLOURS.get(w) or next(adaptive) for w in widths}
    marker = {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(models)}

    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    for row in points:
        axes.scatter(
            row.activation_mib,
            row.recall,
            color=colour[trial_width(row.settings)],
            marker=marker[row.settings["model"]],
            s=60,
            edgecolors="black" if row.pareto else "none",
            linewidths=1.2,
            zorder=3,
        )
    front = sorted((row for row in points if row.pareto), key=lambda r: r.activation_mib)
    axes.step(
        [r.activation_mib for r in front],
        [r.recall for r in front],
        where="post",
        linestyle="--",
        color="grey",
        zorder=2,
        label="Pareto front",
    )
    popular = popularity_line(points)
    if popular is not None:
        axes.axhline(popular, linestyle=":", color="black", linewidth=1, zorder=1)
    memory = [row.activation_mib for row in points]
    if min(memory) > 0 and max(memory) / min(memory) > 10:
        axes.set_xscale("log")
    axes.set_xlabel("activation memory per training step (MiB)")
    axes.set_ylabel("test Recall@20")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    handles = [Line2D([], [], color=colour[w], marker="o", linestyle="", label=w) for w in widths]
    handles += [
        Line2D([], [], color="black", marker=marker[m], linestyle="", fillstyle="none", label=m)
        for m in models
    ]
    handles.append(Line2D([], [], color="grey", linestyle="--", label="Pareto front"))
    if popular is not None:
        handles.append(Line2D([], [], color="black", linestyle=":", label="most popular"))
    axes.legend(handles=handles, fontsize=8, loc="best")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
