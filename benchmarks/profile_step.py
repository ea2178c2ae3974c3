"""Where a training step's time goes: each phase's step time at FP32 and at a compressed width, and
`torch.profiler` tables of a few steps of each, on the CPU or a GPU.

    python -m benchmarks.profile_step [--dataset lfm1m-kgat] [--model kgat] [--bits 2]
        [--device cpu|cuda] [--steps 10] [--rows 25] [--out profile.txt] [--python-profile]
        [--model-sizes]

The trainer's own session and step (`bench_memory.open_step_session`, `epoch.run_phase`) on the
epoch's first batch of each phase (CF, and KG for models with a KG phase), after three warm-up
steps; the model's epoch-start hook (KGAT's attention refresh) is timed too. It prints the medians
and writes the profiler tables (sorted by device time on CUDA, then by host time) to `--out`. A
diagnostic, not a section of BENCHMARKS.md: step time on a GPU is worth reading here against the
device time the kernels took (the rest is the host launching them), which a timer cannot tell apart.
On CUDA each phase's line also gives `max_memory_allocated` over its timed steps (every tensor of the
process: tables, graph, optimizer state, activations, temporaries). `--python-profile` adds
`cProfile` tables of as many steps again (the Python functions the host spends its time in, by own
time and by cumulative time), for a step that is host-bound. The session has `TrainConfig`'s
generic sizes (batch 2048, 64 wide, 3 layers) unless `--model-sizes` asks for the model's own
defaults, the step `pipelines.train --model` and `bench_epoch_time` run (KGCN's differ most).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks._cli import missing_cuda
from benchmarks._datasets import DatasetUnavailable, resolve_dataset
from benchmarks.bench_memory import OneBatch, open_step_session
from tinykg_train.compression_defaults import BITS
from tinykg_train.config import MODELS

WARMUP_STEPS = 3
PROFILED_STEPS = 3


def timed(device: torch.device, work) -> float:
    """Seconds `work()` took, the device's queue drained before and after."""
    from tinykg_train.epoch import synchronize

    synchronize(device)
    start = time.perf_counter()
    work()
    synchronize(device)
    return time.perf_counter() - start


def python_profile(device: torch.device, step, steps: int) -> pstats.Stats:
    """`cProfile` statistics of `steps` calls of `step` (the device drained after them)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    timed(device, lambda: None)
    profiler.disable()
    return pstats.Stats(profiler, stream=io.StringIO())


def write_python_tables(stats: pstats.Stats, title: str, rows: int, out) -> None:
    """`stats`' top `rows` functions by own time and by cumulative time, under `title`."""
    for key in ("tottime", "cumtime"):
        text = io.StringIO()
        stats.stream = text
        stats.sort_stats(key).print_stats(rows)
        body = text.getvalue()
        start = body.find("   ncalls")  # drop the header of file names and the blank lines
        out.write(f"\n### {title}, cProfile by {key}\n{body[start:] if start >= 0 else body}")


def profile_width(data: Path, model: str, bits: int, device: torch.device, steps: int,
                  rows: int, out, python: bool = False, model_sizes: bool = False) -> list[str]:  # fmt: skip
    """Lines of `model`'s step times at `bits`; its profiler tables (and, with `python`, the
    cProfile tables of `steps` more steps) are written to `out`. `model_sizes`: the model's own
    default settings rather than `TrainConfig`'s generic ones (`open_step_session`)."""
    from torch.profiler import ProfilerActivity, profile

    from tinykg_train.epoch import run_phase

    lines = []
    with tempfile.TemporaryDirectory(prefix="profile_step_") as tmp:
        session = open_step_session(data, model, bits, device, Path(tmp), model_sizes)
        hook = timed(device, lambda: session.model.on_epoch_start(0))
        lines.append(f"{model} bits {bits}: epoch-start hook {hook * 1e3:.1f} ms")
        phases = [("cf", session.cf_batches, session.model.loss)]
        if session.kg_batches is not None:
            phases.append(("kg", session.kg_batches, session.model.kg_loss))
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        for phase, batches, loss_fn in phases:
            batch = OneBatch(next(iter(batches.epoch(0))))

            def step(phase=phase, batch=batch, loss_fn=loss_fn) -> None:
                run_phase(session, 0, phase, batch, loss_fn, measure=False)

            for _ in range(WARMUP_STEPS):
                step()
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            seconds = statistics.median(timed(device, step) for _ in range(steps))
            peak = ""
            if device.type == "cuda":
                peak_mib = torch.cuda.max_memory_allocated(device) / 2**20
                peak = f", peak allocated {peak_mib:,.0f} MiB"
            lines.append(
                f"{model} bits {bits}: {phase} step {seconds * 1e3:.2f} ms (median of {steps}){peak}"
            )
            with profile(activities=activities) as prof:
                for _ in range(PROFILED_STEPS):
                    step()
                timed(device, lambda: None)
            keys = (["self_cuda_time_total"] if device.type == "cuda" else []) + [
                "self_cpu_time_total"
            ]
            for key in keys:
                out.write(f"\n### {model} bits {bits}, {phase} phase, {PROFILED_STEPS} steps, by {key}\n")
                out.write(prof.key_averages().table(sort_by=key, row_limit=rows,
                                                    max_name_column_width=70))  # fmt: skip
            if python:
                title = f"{model} bits {bits}, {phase} phase, {steps} steps"
                write_python_tables(python_profile(device, step, steps), title, rows, out)
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_step",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", default="lfm1m-kgat", help="a ../shared/data name or a dir")
    parser.add_argument("--model", choices=MODELS, default="kgat")
    parser.add_argument("--bits", type=int, choices=BITS, default=2, help="profiled beside FP32")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per phase and width")
    parser.add_argument("--rows", type=int, default=25, help="rows of each profiler table")
    parser.add_argument("--out", type=Path, default=Path("profile.txt"),
                        help="where the profiler tables go (default profile.txt)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--model-sizes", action="store_true",
                        help="the model's own default settings, as pipelines.train --model trains "
                        "it (default: TrainConfig's generic sizes: batch 2048, 64 wide, 3 layers)")  # fmt: skip
    parser.add_argument("--python-profile", action="store_true",
                        help="also write cProfile tables of --steps steps per phase and width")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = missing_cuda(args.device) or (
        "--steps, --rows and --threads need to be at least 1"
        if min(args.steps, args.rows, args.threads) < 1
        else None
    )
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        _, data = resolve_dataset(args.dataset)
    except DatasetUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    with args.out.open("w") as out:
        for bits in dict.fromkeys((32, args.bits)):
            for line in profile_width(
                data,
                args.model,
                bits,
                device,
                args.steps,
                args.rows,
                out,
                args.python_profile,
                args.model_sizes,
            ):
                print(line, flush=True)
    print(f"profiler tables: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
