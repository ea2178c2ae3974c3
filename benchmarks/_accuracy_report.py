"""Aggregate `bench_accuracy` runs over seeds into BENCHMARKS.md tables and memory-vs-accuracy plots.

Per (dataset, model, width): test Recall@20 / NDCG@20 mean ± sample std over seeds, their ratios to
FP32 (of the means) and the per-seed difference to FP32 (same seed = same initial weights and
batches, so the pair isolates the compression), mean epoch seconds and its ratio to FP32, and the
bytes held for backward in one step with FP32 / INTb.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._report import figure_name, markdown_table, width_label

GOAL_RECALL_RATIO = 0.99  # KGAT INT2 / FP32 test Recall@20
GOAL_EPOCH_RATIO = 1.10  # INT2 / FP32 epoch seconds on the CPU
METRICS = ("recall@20", "ndcg@20")


@dataclass(frozen=True)
class Run:
    """One finished run: where it belongs in the matrix and its metrics.json."""

    dataset: str
    model: str
    bits: int
    seed: int
    metrics: dict[str, Any]


def epoch_seconds(metrics: dict[str, Any]) -> float:
    """Mean seconds of the run's epochs after the first (which carries one-time set-up: lazy
    samplers, imports, allocator warm-up); the only epoch when there is one."""
    seconds = metrics["epoch_seconds"]
    return statistics.fmean(seconds[1:] if len(seconds) > 1 else seconds)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


@dataclass
class Cell:
    """The seeds of one (dataset, model, width)."""

    runs: dict[int, dict[str, Any]] = field(default_factory=dict)  # seed -> metrics

    def values(self, key: str) -> list[float]:
        return [float(m[key]) for m in self.runs.values()]

    def stat(self, key: str) -> tuple[float, float]:
        return mean_std(self.values(key))

    @property
    def epoch_seconds(self) -> float:
        return statistics.fmean(epoch_seconds(m) for m in self.runs.values())

    @property
    def activation_bytes(self) -> float:
        return statistics.fmean(float(m["activation_bytes"]) for m in self.runs.values())

    @property
    def best_epoch(self) -> float:
        return statistics.fmean(float(m["best_epoch"]) + 1 for m in self.runs.values())

    @property
    def epochs_trained(self) -> float:
        return statistics.fmean(float(m["epochs_trained"]) for m in self.runs.values())

    def paired_difference(self, base: Cell, key: str) -> tuple[float, float, int] | None:
        """Mean and std of this cell minus `base` over the seeds both have, and how many."""
        seeds = sorted(set(self.runs) & set(base.runs))
        if not seeds:
            return None
        return (*mean_std([self.runs[s][key] - base.runs[s][key] for s in seeds]), len(seeds))


Grid = dict[str, dict[str, dict[int, Cell]]]  # dataset -> model -> bits -> cell


def group(runs: Sequence[Run]) -> Grid:
    grid: Grid = {}
    for run in runs:
        cell = (
            grid.setdefault(run.dataset, {}).setdefault(run.model, {}).setdefault(run.bits, Cell())
        )
        cell.runs[run.seed] = run.metrics
    return grid


def spread(mean: float, std: float, n: int, sign: str = "") -> str:
    """`mean ± std`, or the mean alone for one seed (no spread to show)."""
    return f"{mean:{sign}.4f} ± {std:.4f}" if n > 1 else f"{mean:{sign}.4f}"


def results_table(models: dict[str, dict[int, Cell]]) -> str:
    headers = [
        "model", "width", "seeds", "Recall@20", "NDCG@20", "Recall / FP32", "NDCG / FP32",
        "Δ Recall vs FP32 (same seed)", "epoch s", "epoch / FP32", "held MiB", "FP32 / held",
        "best epoch / run",
    ]  # fmt: skip
    rows = []
    for model, cells in models.items():
        base = cells.get(32)
        for bits in sorted(cells, key=lambda b: -b):
            cell = cells[bits]
            (r, r_sd), (n, n_sd) = cell.stat("recall@20"), cell.stat("ndcg@20")
            compared = base is not None and bits != 32
            diff = cell.paired_difference(base, "recall@20") if compared else None
            rows.append(
                [
                    model,
                    width_label(bits),
                    len(cell.runs),
                    spread(r, r_sd, len(cell.runs)),
                    spread(n, n_sd, len(cell.runs)),
                    f"{r / base.stat('recall@20')[0]:.3f}" if compared else "",
                    f"{n / base.stat('ndcg@20')[0]:.3f}" if compared else "",
                    spread(*diff, sign="+") if diff else "",
                    f"{cell.epoch_seconds:.2f}",
                    f"{cell.epoch_seconds / base.epoch_seconds:.2f}" if compared else "",
                    f"{cell.activation_bytes / 2**20:.2f}",
                    f"{base.activation_bytes / cell.activation_bytes:.1f}x" if compared else "",
                    f"{cell.best_epoch:.0f} / {cell.epochs_trained:.0f}",
                ]
            )
    return markdown_table(headers, rows)


def goal_lines(models: dict[str, dict[int, Cell]], device_type: str) -> list[str]:
    """The issue's goals for one dataset, each with its measured value and verdict."""
    lines = []
    kgat, bprmf = models.get("kgat", {}), models.get("bprmf", {})
    verdict = lambda ok: "met" if ok else "MISSED"  # noqa: E731
    if 32 in kgat and 2 in kgat:
        ratio = kgat[2].stat("recall@20")[0] / kgat[32].stat("recall@20")[0]
        lines.append(
            f"- KGAT INT2 / FP32 test Recall@20: **{ratio:.3f}** "
            f"(goal >= {GOAL_RECALL_RATIO}: {verdict(ratio >= GOAL_RECALL_RATIO)})"
        )
        epoch = kgat[2].epoch_seconds / kgat[32].epoch_seconds
        goal = (
            f"goal <= {GOAL_EPOCH_RATIO:.2f} on CPU: {verdict(epoch <= GOAL_EPOCH_RATIO)}"
            if device_type == "cpu"
            else f"the <= {GOAL_EPOCH_RATIO:.2f} goal is for the CPU"
        )
        lines.append(f"- KGAT INT2 / FP32 epoch time: **{epoch:.2f}** ({goal})")
    if 32 in kgat and 32 in bprmf:
        k, b = kgat[32].stat("recall@20")[0], bprmf[32].stat("recall@20")[0]
        lines.append(
            f"- KGAT vs BPR-MF at FP32, test Recall@20: **{k:.4f} vs {b:.4f}** "
            f"(goal: KGAT higher: {verdict(k > b)})"
        )
    return lines


SETTING_COLUMNS = (
    ("epochs", "epochs"), ("lr", "lr"), ("l2", "l2"), ("batch_size", "batch"),
    ("embed_dim", "embed"), ("n_layers", "layers"), ("dropout", "dropout"),
    ("eval_every", "eval every"), ("patience", "patience"),
)  # fmt: skip


def settings_table(configs: dict[Any, Any]) -> str:
    """The settings each model ran with (from its first planned run)."""
    rows, seen = [], set()
    for run, config in configs.items():
        if run.model in seen:
            continue
        seen.add(run.model)
        values = config.to_dict()
        other = {"kgcn": ["kg_neighbors"], "kgin": ["n_intents"], "kgat": ["kg_batch_size"]}
        extra = [f"{k}={values[k]}" for k in other.get(run.model, [])]
        extra += [f"{k}={v}" for k, v in sorted(values["extra"].items())]
        if values["max_batches_per_epoch"]:
            extra.append(f"max_batches_per_epoch={values['max_batches_per_epoch']}")
        rows.append([run.model, *(values[k] for k, _ in SETTING_COLUMNS), ", ".join(extra)])
    return markdown_table(["model", *(label for _, label in SETTING_COLUMNS), "other"], rows)


def plot(dataset: str, models: dict[str, dict[int, Cell]], device_label: str, path: Path) -> Path:
    """Held MiB (log x) against test Recall@20 (± std): one point per model and width, labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.9), dpi=100)
    colors = plt.get_cmap("tab10")
    for index, (model, cells) in enumerate(models.items()):
        widths = sorted(cells, key=lambda b: -b)
        xs = [cells[b].activation_bytes / 2**20 for b in widths]
        stats = [cells[b].stat("recall@20") for b in widths]
        ys, errors = [s[0] for s in stats], [s[1] for s in stats]
        color = colors(index)
        ax.errorbar(xs, ys, yerr=errors, color=color, marker="o", markersize=4, linewidth=0.8,
                    capsize=2, label=model)  # fmt: skip
        for x, y, bits in zip(xs, ys, widths, strict=True):
            ax.annotate("32" if bits == 32 else str(bits), (x, y), fontsize=7, color=color,
                        xytext=(3, 3), textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("MiB held for backward in one step (log); labels: bits")
    ax.set_ylabel("test Recall@20 (mean ± std)")
    ax.set_title(f"Memory vs accuracy on {dataset} ({device_label})", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    ax.grid(alpha=0.3, linewidth=0.5)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def kernel_backends(runs: Sequence[Run]) -> str:
    """The tinykg_kernels backends the runs' calls ran on, with how many runs used each (runs
    written before metrics.json recorded them are left out); empty when none recorded."""
    counts: dict[str, int] = {}
    for run in runs:
        used = {b for per_op in run.metrics.get("kernels_backends", {}).values() for b in per_op}
        for backend in used:
            counts[backend] = counts.get(backend, 0) + 1
    return ", ".join(f"{backend} ({n} of {len(runs)} runs)" for backend, n in sorted(counts.items()))


def report(
    runs: Sequence[Run],
    configs: dict[Any, Any],
    section: str,
    device,
    figures: Path | None,
    note: str = "",
) -> tuple[str, str, str]:
    """(title, body, the results tables alone) for section `section` of BENCHMARKS.md (the runs of
    one dataset); draws its figure into `figures` unless it is None."""
    import torch

    grid = group(runs)
    device_label = "CPU" if device.type == "cpu" else torch.cuda.get_device_name(device)
    seeds = sorted({r.seed for r in runs})
    parts = [
        f"Each run: `tinykg_train.trainer.train` (the code of `pipelines.train`) with the model's "
        f"`configs/<model>.yaml`, the settings below, seeds {seeds}; test metrics of the best "
        "valid epoch (early stopping on valid Recall@20), full ranking over all items with "
        "training and valid items masked. Mean ± sample std over seeds; ratios are of the means. "
        "*Same seed* pairs runs with identical initial weights, batches and negatives, so only "
        "the compression differs. *epoch s*: mean of each run's epochs after the first (the first "
        "carries one-time set-up), training only (no evaluation). *held MiB*: bytes autograd holds "
        "for backward in one CF step (`activation_bytes` of metrics.json). *best epoch / run*: "
        "where the best valid Recall@20 was and how many epochs ran (means over seeds).",
        settings_table(configs),
        note,
    ]
    tables = []
    for dataset, models in grid.items():
        table = results_table(models)
        tables.append(f"{dataset}:\n\n{table}")
        parts += [f"### {dataset}", table, "\n".join(goal_lines(models, device.type))]
        if figures is not None:
            name = figure_name(section)
            plot(dataset, models, device_label, figures / name)
            parts.append(f"![memory vs accuracy on {dataset}](benchmarks/figures/{name})")
    backends = kernel_backends(runs)
    if backends:
        parts.append(f"Kernel backends that ran (tinykg_kernels, from metrics.json): {backends}.")
    if device.type == "cpu":
        parts.append(
            f"CPU threads: {torch.get_num_threads()}; load average (1 min) when this report was "
            f"written: {os.getloadavg()[0]:.2f} (the machine is shared: other work during the runs "
            "slows their epochs)."
        )
    title = f"Accuracy per bit width ({', '.join(grid)}; {device_label})"
    return title, "\n\n".join(part for part in parts if part), "\n\n".join(tables)
