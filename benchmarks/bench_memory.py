"""Activation memory and step time of one training step, per model and bit width, on lfm1m; with
`--peak`, the whole process's peak memory and its breakdown (`benchmarks._peak_memory`).

    python -m benchmarks.bench_memory [--dataset lfm1m-kgat] [--models kgat,kgin,kgcn,lightgcn,bprmf]
                                      [--bits 32,8,4,2,1] [--repeats 3] [--device auto|cpu|cuda]
    python -m benchmarks.bench_memory --peak [--dataset synthetic:50000|lfm1m-kgat] [--bits 32,2]
                                      [--steps 2] [--save cells.json] [--compare before.json]

Each (model, bits) gets the trainer's own session (`tinykg_train.session.open_session` with a default
`TrainConfig`: batch 2048, embedding 64, 3 layers) and runs the trainer's own step
(`tinykg_train.epoch.run_phase`, one CF batch): the first step is measured with the `ActivationMeter`
inside the compression hooks, exactly as the trainer measures `activation_bytes` for metrics.json.
Every width of a model trains on the same pre-drawn batch, so drawing batches is not timed. Step time
(zero_grad, forward, backward, Adam) is the median of `--repeats` steps after a warm-up, the widths
taking turns so that load from other processes hits them alike.

Section `memory-<dataset>-<device>`. On CUDA it also gives, per step, `torch.cuda.max_memory_allocated`
during one step minus what was allocated before it (so parameters, Adam state, graph buffers and the
batch are excluded; what is left is activations, temporaries and gradients), measured on a step after
the warm-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmarks._cli import add_device_options, comma_list
from benchmarks._datasets import DatasetUnavailable, resolve_dataset
from benchmarks._report import (
    figure_name,
    figures_dir_for,
    markdown_table,
    publish_section,
    section_name,
    width_label,
)
from tinykg_kernels import backend_usage, dispatch
from tinykg_train.config import MODELS

BITS = (32, 8, 4, 2, 1)
GOALS = {("kgat", 2): 10.0, ("kgat", 1): 16.0}  # FP32 / INTb of the bytes held for backward


class OneBatch:
    """A `BPRBatches` look-alike that yields one pre-drawn batch per epoch, so `run_phase` runs
    exactly one step on it and drawing batches stays out of the timing."""

    def __init__(self, batch: Sequence[torch.Tensor]) -> None:
        self.batch = list(batch)

    def __len__(self) -> int:
        return 1

    def epoch(self, epoch: int):
        return iter([self.batch])


@dataclass
class Measurement:
    """What one (model, bits) step measured."""

    model: str
    bits: int
    activation_bytes: int = 0
    by_module: dict[str, int] = field(default_factory=dict)
    step_seconds: list[float] = field(default_factory=list)
    cuda_step_peak_bytes: int | None = None

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.step_seconds)


def open_step_session(
    data: Path, model: str, bits: int, device: torch.device, out: Path, model_sizes: bool = False
):
    """The trainer's session for `model` at `bits` (writes nothing): `TrainConfig`'s generic
    sizes, or with `model_sizes` the model's own defaults, as `pipelines.train --model` trains it
    (KGCN: 1 hop, 32 wide, batches of 1024, where the generic sizes are 3, 64 and 2048)."""
    from tinykg_train.config import TrainConfig
    from tinykg_train.session import open_session

    settings = dict(
        data=str(data), model=model, bits=bits, device=device.type, out=str(out / f"{model}-{bits}")
    )
    config = TrainConfig.layered(settings) if model_sizes else TrainConfig(**settings)
    session = open_session(config, device)
    session.model.train()
    session.model.on_epoch_start(0)  # as train_epoch does (KGAT computes its attention)
    return session


def train_step(session, batch: OneBatch, measure: bool) -> tuple[float, int | None, dict]:
    """One trainer step (`run_phase` on one batch); returns (seconds, activation bytes, by module)."""
    from tinykg_train.epoch import run_phase, synchronize

    synchronize(session.device)
    start = time.perf_counter()
    _, activation_bytes, by_module = run_phase(
        session, 0, "cf", batch, session.model.loss, measure=measure
    )
    synchronize(session.device)
    return time.perf_counter() - start, activation_bytes, by_module


def cuda_step_peak(session, batch: OneBatch) -> int:
    """Allocator peak during one step minus what was allocated before it (CUDA only)."""
    device = session.device
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    train_step(session, batch, measure=False)
    return int(torch.cuda.max_memory_allocated(device) - before)


def measure_model(
    data: Path, model: str, bits_list: Sequence[int], device: torch.device, repeats: int
) -> list[Measurement]:
    """Bytes held for backward, CUDA peak and step times of `model` at every width in `bits_list`."""
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as tmp:
        sessions = {b: open_step_session(data, model, b, device, Path(tmp)) for b in bits_list}
        first = sessions[bits_list[0]]
        batch = OneBatch(next(iter(first.cf_batches.epoch(0))))
        results = {b: Measurement(model, b) for b in bits_list}
        for bits, session in sessions.items():  # the trainer's measured step: the epoch's first
            _, held, by_module = train_step(session, batch, measure=True)
            results[bits].activation_bytes, results[bits].by_module = int(held), by_module
            if device.type == "cuda":
                results[bits].cuda_step_peak_bytes = cuda_step_peak(session, batch)
        for _ in range(repeats):
            for bits, session in sessions.items():
                seconds, _, _ = train_step(session, batch, measure=False)
                results[bits].step_seconds.append(seconds)
    return [results[b] for b in bits_list]


# -- report -----------------------------------------------------------------------------------------


def mib(n: float) -> str:
    return f"{n / 2**20:.2f}" if n < 10 * 2**20 else f"{n / 2**20:.1f}"


def grid(results: list[Measurement]) -> dict[str, dict[int, Measurement]]:
    table: dict[str, dict[int, Measurement]] = {}
    for m in results:
        table.setdefault(m.model, {})[m.bits] = m
    return table


def bytes_table(results: list[Measurement], bits_list: Sequence[int], key) -> str:
    """Rows: models; cells: MiB and FP32 / INTb of the quantity `key(measurement)`."""
    rows = []
    for model, row in grid(results).items():
        base = key(row[32]) if 32 in row else None
        cells = []
        for bits in bits_list:
            value = key(row[bits])
            ratio = f" ({base / value:.1f}x)" if base and bits != 32 else ""
            cells.append(f"{mib(value)}{ratio}")
        rows.append([model, *cells])
    return markdown_table(["model", *(f"{width_label(b)} MiB" for b in bits_list)], rows)


def time_table(results: list[Measurement], bits_list: Sequence[int]) -> str:
    """Rows: models; cells: median step ms and INTb / FP32."""
    rows = []
    for model, row in grid(results).items():
        base = row[32].median_seconds if 32 in row else None
        cells = []
        for bits in bits_list:
            seconds = row[bits].median_seconds
            ratio = f" ({seconds / base:.2f}x)" if base and bits != 32 else ""
            cells.append(f"{seconds * 1e3:.1f}{ratio}")
        rows.append([model, *cells])
    return markdown_table(["model", *(f"{width_label(b)} ms" for b in bits_list)], rows)


def goal_lines(results: list[Measurement]) -> list[str]:
    table, lines = grid(results), []
    for (model, bits), goal in GOALS.items():
        row = table.get(model, {})
        if 32 not in row or bits not in row:
            continue
        ratio = row[32].activation_bytes / row[bits].activation_bytes
        verdict = "met" if ratio >= goal else "MISSED"
        lines.append(
            f"- {model} FP32 / {width_label(bits)}: **{ratio:.1f}x** (goal >= {goal:g}x: {verdict})"
        )
    return lines


def plot(
    results: list[Measurement], bits_list: Sequence[int], key, ylabel: str, title: str, path: Path
) -> Path:
    """Grouped bars: one group per model, one bar per width, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = grid(results)
    models = list(table)
    fig, ax = plt.subplots(figsize=(6.5, 3.4), dpi=100)
    step = 0.8 / len(bits_list)
    colors = plt.get_cmap("viridis")(
        [i / max(len(bits_list) - 1, 1) for i in range(len(bits_list))]
    )
    for i, bits in enumerate(bits_list):
        xs = [m + (i - (len(bits_list) - 1) / 2) * step for m in range(len(models))]
        ax.bar(
            xs,
            [key(table[m][bits]) / 2**20 for m in models],
            step,
            label=width_label(bits),
            color=colors[i],
        )
    ax.set_xticks(range(len(models)), models)
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, ncols=len(bits_list), loc="upper right", frameon=False)
    ax.margins(y=0.15)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def report(
    results: list[Measurement],
    bits_list: Sequence[int],
    dataset: str,
    device: torch.device,
    repeats: int,
    sizes: str,
    figures: Path | None,
    kernel_calls: dict[str, dict[str, int]] | None = None,
) -> tuple[str, str, str]:
    """(section name, title, body) for BENCHMARKS.md; draws the figure into `figures` unless None.
    `kernel_calls`: `tinykg_kernels.backend_usage` over the run (what the codec calls ran on)."""
    intro = (
        f"One training step of each model on {dataset} with the default `TrainConfig` sizes ({sizes}), "
        "run by the trainer's own code (`open_session` + `run_phase` on one CF batch, the same batch "
        "at every width). *Held for backward* is `ActivationMeter`'s count on the first step, exactly "
        "the `activation_bytes` of metrics.json: what autograd keeps after compression, parameters and "
        "graph buffers excluded, a storage counted once. In brackets: FP32 / INTb. MiB = 2^20 bytes."
    )
    timing = (
        f"Step time (zero_grad, forward, backward, Adam; median of {repeats} steps after a warm-up, "
        "the widths taking turns), in brackets INTb / FP32:"
    )
    held = lambda m: m.activation_bytes  # noqa: E731
    parts = [intro, "Held for backward (MiB):", bytes_table(results, bits_list, held)]
    parts.append("\n".join(goal_lines(results)))
    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
        title = f"Activation memory per model and bit width ({dataset}; CUDA, {gpu})"
        key, what = (lambda m: m.cuda_step_peak_bytes), "CUDA step memory"
        figure_args = ("MiB, step peak - before (log)", f"CUDA memory of one step on {dataset}")
        parts[0] = f"GPU: **{gpu}**. {intro}"
        parts += [
            "`torch.cuda.max_memory_allocated` during one step (a step after the warm-up) minus "
            "`memory_allocated` before it, MiB: parameters, Adam state, graph buffers and the batch "
            "are excluded; activations, the forward's and backward's temporaries and the gradients "
            "are in (temporaries are not saved for backward, so compression cannot shrink them):",
            bytes_table(results, bits_list, key),
            timing,
            time_table(results, bits_list),
        ]
    else:
        title = f"Activation memory per model and bit width ({dataset}; CPU)"
        key, what = held, "activation memory"
        figure_args = ("MiB held for backward (log)", f"Activation memory of one step on {dataset}")
        parts += [
            timing,
            time_table(results, bits_list),
            f"CPU threads: {torch.get_num_threads()}; load average (1 min) at the end: "
            f"{os.getloadavg()[0]:.2f} (other work on the shared cores slows every figure; the "
            "ratios compare steps taken side by side). Quantizing and dequantizing run on the "
            f"`{dispatch.requested_backend()}` backend of tinykg_kernels (`auto`: native C++ loops "
            "for CPU tensors of 4,096+ elements, the torch path for smaller ones, Triton on CUDA); "
            "any compiling happens in the warm-up step, outside the timing.",
        ]
    if kernel_calls:
        parts.append(f"Kernel calls by the backend that ran them: {calls_line(kernel_calls)}.")
    section = section_name("memory", device.type, dataset)
    if figures is not None:
        name = figure_name(section)
        plot(results, bits_list, key, *figure_args, figures / name)
        parts.append(f"![{what} per model and width](benchmarks/figures/{name})")
    return section, title, "\n\n".join(part for part in parts if part)  # no goal: no line


def calls_line(usage: dict[str, dict[str, int]]) -> str:
    """`backend_usage` as one line: `quantize: cpu-native 120, torch 8; ...`."""
    return "; ".join(
        f"{op}: " + ", ".join(f"{backend} {calls:,}" for backend, calls in per_op.items())
        for op, per_op in usage.items()
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_memory",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--dataset",
        default="lfm1m-kgat",
        help="shared dataset name or ingested dir (default lfm1m-kgat)",
    )
    parser.add_argument("--models", type=comma_list(str, MODELS), default=list(MODELS))
    parser.add_argument("--bits", type=comma_list(int, BITS), default=list(BITS))
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per width (default 3)")
    add_device_options(parser)
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    peak = parser.add_argument_group("--peak: the whole process's peak and its breakdown")
    peak.add_argument("--peak", action="store_true", help="each cell in a fresh process; section memory-peak-DATASET-DEVICE")
    peak.add_argument("--steps", type=int, default=2, help="CF (and KG) steps of the cell's epoch (default 2)")
    peak.add_argument("--eval-block-bytes", type=int, help="the evaluator's block budget (default its own)")
    peak.add_argument("--save", type=Path, help="write the cells to this JSON file")
    peak.add_argument("--compare", type=Path, help="cells saved by an earlier run: shown as 'was'")
    peak.add_argument("--source", type=Path, help="train with the packages of this checkout instead (e.g. the code before a change)")
    args = parser.parse_args(argv)
    if args.peak:
        return peak_main(args)
    from tinykg_train.config import TrainConfig
    from tinykg_train.device import resolve_device
    from tinykg_train.errors import TinyKGError

    if args.threads:
        torch.set_num_threads(args.threads)
    bits_list = [32, *(b for b in args.bits if b != 32)]  # FP32 first: every ratio needs it
    try:
        device = resolve_device(args.device)
        dataset, data = resolve_dataset(args.dataset)
    except (TinyKGError, DatasetUnavailable) as exc:
        print(exc, file=sys.stderr)
        return 2
    defaults = TrainConfig()
    sizes = (
        f"batch {defaults.batch_size}, embedding {defaults.embed_dim}, {defaults.n_layers} layers"
    )
    results: list[Measurement] = []
    calls_before = backend_usage()
    for model in args.models:
        for m in measure_model(data, model, bits_list, device, args.repeats):
            results.append(m)
            peak = (
                ""
                if m.cuda_step_peak_bytes is None
                else f", CUDA step peak {mib(m.cuda_step_peak_bytes)} MiB"
            )
            print(
                f"{model} {width_label(m.bits)}: {mib(m.activation_bytes)} MiB held, {m.median_seconds * 1e3:.1f} ms/step{peak}",
                flush=True,
            )
    figures = figures_dir_for(write=not args.no_write)
    section, title, body = report(
        results,
        bits_list,
        dataset,
        device,
        args.repeats,
        sizes,
        figures,
        backend_usage(since=calls_before),
    )
    print(body)
    publish_section(section, title, body, write=not args.no_write)
    return 0


def peak_main(args: argparse.Namespace) -> int:
    """`--peak`: one fresh process per (model, bits) cell; see `benchmarks._peak_memory`."""
    from benchmarks import _peak_memory as peak
    from benchmarks._datasets import BENCH_DATA

    device = "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
    try:
        if args.dataset.startswith("synthetic:"):
            users = int(args.dataset.split(":", 1)[1])
            dataset, data = f"synthetic KGAT {users:,} users", peak.synthetic_dataset(users, BENCH_DATA)
        else:
            dataset, data = resolve_dataset(args.dataset)
    except (DatasetUnavailable, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 2
    before = peak.load_cells(args.compare) if args.compare else {}
    cells = []
    for model in args.models:
        for bits in [32, *(b for b in args.bits if b != 32)]:
            cell = peak.measure_cell(
                data, model, bits, args.steps, device, args.eval_block_bytes, args.source
            )
            cells.append(cell)
            print(
                f"{model} {width_label(bits)}: peak RSS {mib(cell.peak_rss_bytes)} MiB, tracked "
                f"{mib(cell.tracked_peak() or 0)} MiB, stages {cell.stage_rss_bytes}, "
                f"{cell.seconds:.0f} s",
                flush=True,
            )
            if args.save:
                peak.save_cells(args.save, cells)
    body = peak.report(cells, dataset, peak.dataset_shape(data), before, device)
    print(body)
    name = f"synthetic-{users}" if args.dataset.startswith("synthetic:") else dataset
    section = section_name("memory-peak", device, name)
    title = f"Peak memory per model and bit width, broken down ({device.upper()}, {dataset})"
    publish_section(section, title, body, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
