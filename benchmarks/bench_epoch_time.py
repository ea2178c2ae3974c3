"""Epoch time of a compressed width against FP32, their epochs taking turns (CPU or CUDA).

A machine shared with other work (a VM, a CI runner) changes speed from minute to minute: epochs
timed in runs minutes apart can differ by a third with the code unchanged, more than the overhead
being measured. Here an FP32 and an INT`bits` training of the same model and seed live in two
worker processes (each its own allocator and caches, one torch thread). Both warm up (the first
epochs compile the codec), then they run one epoch at a time, taking turns, the other waiting idle:
each epoch is timed alone on the machine, and a drift in its speed reaches both widths alike. The
order within a round alternates. Both run the trainer's own `train_epoch` (CF phase, KG phase, no
evaluation) and report its `epoch_seconds`.

`--allocator` picks the workers' CPU allocator (`tinykg_train.allocator`): `tuned`, what the trainer
sets on the CPU, glibc's `default`, whose page faults slow the widths by different amounts, or
`both`: four workers (two widths, two allocators) taking turns, so the allocators are compared in the
same rounds. `--device cuda` trains both workers on the GPU (the allocator then only serves host
tensors) and also reports each width's `torch.cuda.max_memory_allocated` over its timed epochs.
Section `epoch-time-<dataset>-<device>` (the latest run, whichever allocators it timed).

    python -m benchmarks.bench_epoch_time [--dataset music-kgcn] [--models kgat,kgin] [--bits 2]
        [--warmup 2] [--rounds 10] [--allocator tuned|default|both] [--device cpu|cuda]
        [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from tqdm.auto import tqdm

from benchmarks._cli import comma_list, missing_cuda
from benchmarks._datasets import DatasetUnavailable, resolve_dataset
from benchmarks._report import (
    REPO_ROOT,
    markdown_table,
    publish_section,
    section_name,
    width_label,
)
from tinykg_train.allocator import CHOICES as ALLOCATORS
from tinykg_train.allocator import ENV_VAR as ALLOCATOR_ENV
from tinykg_train.compression_defaults import BITS
from tinykg_train.config import MODELS

ALLOCATOR_CHOICES = ("tuned", "default", "both")  # --allocator
ALLOCATOR_NAMES = {"tuned": "tuned", "default": "glibc default"}  # as the report says them


@dataclass(frozen=True)
class Turns:
    """One model's timed epochs with one allocator: `seconds[bits][i]` is round i's epoch at that
    width."""

    model: str
    seconds: dict[int, list[float]]
    allocator: str = "tuned"
    peak_bytes: dict[int, int] | None = None  # per width, the largest CUDA peak of its epochs

    def median(self, bits: int) -> float:
        return statistics.median(self.seconds[bits])

    def round_ratios(self, bits: int) -> list[float]:
        """Each round's epoch at `bits` over the same round's FP32 epoch."""
        return [b / a for a, b in zip(self.seconds[32], self.seconds[bits], strict=True)]


# -- the worker: one training, an epoch per request ---------------------------------------------------


def run_worker(model: str, bits: int, data: str, warmup: int, device_name: str = "cpu") -> int:
    """Train `model` at `bits` on `device_name`: warm up, print `ready`, then run one epoch for each
    `epoch` line on stdin and print its seconds (and on CUDA its `max_memory_allocated`) as JSON,
    until `stop` or the end of stdin."""
    import torch

    from tinykg_train.config import TrainConfig
    from tinykg_train.epoch import train_epoch
    from tinykg_train.session import open_session

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        config = TrainConfig.from_yaml(REPO_ROOT / "configs" / f"{model}.yaml").with_overrides(
            data=data, bits=bits, seed=0, device=device_name, out=f"{tmp}/run"
        )
        device = torch.device(device_name)
        on_cuda = device.type == "cuda"
        session = open_session(config, device)
        for epoch in range(warmup):
            train_epoch(session, epoch)
        print("ready", flush=True)
        epoch = warmup
        for line in sys.stdin:
            if line.strip() != "epoch":
                break
            if on_cuda:
                torch.cuda.reset_peak_memory_stats(device)
            reply = {"epoch_seconds": train_epoch(session, epoch)["epoch_seconds"]}
            if on_cuda:
                reply["max_memory_allocated"] = torch.cuda.max_memory_allocated(device)
            print(json.dumps(reply), flush=True)
            epoch += 1
    return 0


# -- the driver ----------------------------------------------------------------------------------------


class Worker:
    """A worker process, driven line by line."""

    def __init__(
        self, model: str, bits: int, data: str, warmup: int, allocator: str, device: str = "cpu"
    ) -> None:
        self.bits = bits
        self.peak_bytes = 0  # the largest CUDA peak of the epochs timed so far
        command = [
            sys.executable, "-m", "benchmarks.bench_epoch_time", "--worker", "--models", model,
            "--bits", str(bits), "--data", data, "--warmup", str(warmup), "--device", device,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, ALLOCATOR_ENV: allocator},
        )

    def _line(self) -> str:
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            raise RuntimeError(
                f"the {width_label(self.bits)} epoch-time worker stopped (exit "
                f"{self.process.returncode}); see its stderr above"
            )
        return line.strip()

    def wait_ready(self) -> None:
        while self._line() != "ready":
            pass

    def epoch(self) -> float:
        self.process.stdin.write("epoch\n")
        self.process.stdin.flush()
        reply = json.loads(self._line())
        self.peak_bytes = max(self.peak_bytes, int(reply.get("max_memory_allocated", 0)))
        return float(reply["epoch_seconds"])

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write("stop\n")
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


def take_turns(
    model: str,
    bits: int,
    data: str,
    warmup: int,
    rounds: int,
    allocators: Sequence[str] = ("tuned",),
    device: str = "cpu",
) -> list[Turns]:
    """`rounds` epochs at each width with each CPU allocator (see `tinykg_train.allocator`), each
    epoch alone on the machine; the order within a round reverses every other round."""
    arms = [(allocator, width) for allocator in allocators for width in (32, bits)]
    workers = {arm: Worker(model, arm[1], data, warmup, arm[0], device) for arm in arms}
    try:
        for worker in workers.values():  # all warm up at once (their set-up is not timed)
            worker.wait_ready()
        seconds: dict[tuple[str, int], list[float]] = {arm: [] for arm in arms}
        for turn in tqdm(range(rounds), desc=f"{model} rounds", disable=None, leave=False):
            for arm in arms if turn % 2 == 0 else arms[::-1]:
                seconds[arm].append(workers[arm].epoch())
    finally:
        for worker in workers.values():
            worker.close()
    peaks = {arm: worker.peak_bytes for arm, worker in workers.items()}
    return [
        Turns(
            model,
            {width: seconds[(allocator, width)] for width in (32, bits)},
            allocator,
            {width: peaks[(allocator, width)] for width in (32, bits)} if device == "cuda" else None,
        )
        for allocator in allocators
    ]


GOALS = {"cpu": "goal <= 1.10 on CPU", "cuda": "goal <= 1.25 on a GPU"}  # issue 19's targets


def report(
    dataset: str, bits: int, warmup: int, results: list[Turns], device: str = "cpu"
) -> str:
    label = width_label(bits)
    rounds = len(results[0].seconds[32])
    rows, lines = [], []
    for turns in results:
        ratios = turns.round_ratios(bits)
        low, high = (
            (statistics.quantiles(ratios, n=4)[i] for i in (0, 2))
            if len(ratios) > 1
            else (ratios[0], ratios[0])
        )
        ratio = turns.median(bits) / turns.median(32)
        allocator = ALLOCATOR_NAMES[turns.allocator]
        rows.append([
            turns.model, allocator, f"{turns.median(32):.3f}", f"{turns.median(bits):.3f}",
            f"{ratio:.3f}", f"{statistics.median(ratios):.3f} ({low:.3f} to {high:.3f})",
        ] + peak_cells(turns, bits))  # fmt: skip
        lines.append(
            f"- {turns.model} ({allocator} allocator) {label} / FP32 epoch time: **{ratio:.2f}** "
            f"({GOALS[device]})"
        )
    lines += allocator_comparisons(results, bits)
    on_cuda = device == "cuda"
    peak_headers = (
        ["FP32 max allocated MiB", f"{label} max allocated MiB", f"FP32 / {label} memory"]
        if on_cuda
        else []
    )
    table = markdown_table(
        ["model", "allocator", "FP32 epoch s", f"{label} epoch s", f"{label} / FP32",
         "per round: median (quartiles)"] + peak_headers,
        rows,
    )  # fmt: skip
    where = "on the GPU (one torch thread on the host)" if on_cuda else "one torch thread"
    peak_note = (
        " *max allocated*: the largest `torch.cuda.max_memory_allocated` of a width's timed epochs "
        "(the peak is reset before each), the whole training's device memory: tables, Adam "
        "state, graph buffers, activations and temporaries."
        if on_cuda
        else ""
    )
    return (
        f"{dataset}, the models' `configs/<model>.yaml`, seed 0, {where}, {warmup} warm-up "
        f"epochs, then {rounds} rounds of one epoch per worker process (a width with a CPU "
        "allocator: *tuned* is the trainer's, `tinykg_train.allocator`; *glibc default* is "
        "TINYKG_CPU_ALLOCATOR=default), each epoch alone on the machine (the other workers idle; "
        "the order reversing every other round). *epoch s*: median of the timed epochs' "
        "`epoch_seconds` (the trainer's `train_epoch`: CF and KG phases, no evaluation); "
        f"*{label} / FP32*: of the medians; *per round*: each round's {label} epoch over its FP32 "
        f"epoch.{peak_note}\n\n" + table + "\n\n" + "\n".join(lines) + "\n"
    )


def peak_cells(turns: Turns, bits: int) -> list[str]:
    """The CUDA peak columns of `turns`' row: FP32's and `bits`' MiB and their ratio (none on CPU)."""
    if turns.peak_bytes is None:
        return []
    fp32, compressed = turns.peak_bytes[32], turns.peak_bytes[bits]
    ratio = f"{fp32 / compressed:.2f}x" if compressed else "n/a"
    return [f"{fp32 / 2**20:,.1f}", f"{compressed / 2**20:,.1f}", ratio]


def allocator_comparisons(results: list[Turns], bits: int) -> list[str]:
    """For a model timed with both allocators (in the same rounds): the tuned epochs over the
    default's, per width."""
    by_model: dict[str, dict[str, Turns]] = {}
    for turns in results:
        by_model.setdefault(turns.model, {})[turns.allocator] = turns
    lines = []
    for model, timed in by_model.items():
        if {"tuned", "default"} <= set(timed):
            tuned, default = timed["tuned"], timed["default"]
            lines.append(
                f"- {model}, tuned allocator over glibc's default, same rounds: FP32 epoch "
                f"**{tuned.median(32) / default.median(32):.2f}x**, {width_label(bits)} epoch "
                f"**{tuned.median(bits) / default.median(bits):.2f}x**"
            )
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_epoch_time",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", default="music-kgcn", help="a ../shared/data name or a dir")
    parser.add_argument("--models", type=comma_list(choices=MODELS), default=["kgat", "kgin"])
    parser.add_argument("--bits", type=int, choices=BITS, default=2, help="timed against FP32")
    parser.add_argument("--warmup", type=int, default=2, help="untimed epochs first (compiles)")
    parser.add_argument("--rounds", type=int, default=10, help="timed epochs per width")
    parser.add_argument(
        "--allocator",
        choices=ALLOCATOR_CHOICES,
        default="tuned",
        help="the workers' CPU allocator: the trainer's (tuned), glibc's default, or both in turns",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where both workers train (cuda: also their max_memory_allocated)",
    )
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    parser.add_argument("--data", help=argparse.SUPPRESS)  # the worker's dataset dir
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def device_title(device: str) -> str:
    """How the section's title names the device: CPU, or the GPU's own name."""
    if device == "cpu":
        return "CPU"
    import torch

    return torch.cuda.get_device_name(0)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        return run_worker(args.models[0], args.bits, args.data, args.warmup, args.device)
    problem = (
        "--bits needs a compressed width (1, 2, 4 or 8): it is timed against FP32"
        if args.bits == 32
        else f"--rounds needs to be at least 1 (got {args.rounds})"
        if args.rounds < 1
        else f"--warmup needs to be at least 0 (got {args.warmup})"
        if args.warmup < 0
        else missing_cuda(args.device)
    )
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        dataset, data_dir = resolve_dataset(args.dataset)
    except DatasetUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    allocators = ALLOCATORS if args.allocator == "both" else (args.allocator,)
    results = [
        turns
        for model in tqdm(args.models, desc="models", disable=None)
        for turns in take_turns(
            model, args.bits, str(data_dir), args.warmup, args.rounds, allocators, args.device
        )
    ]
    body = report(dataset, args.bits, args.warmup, results, args.device)
    print(body)
    names = " and ".join(ALLOCATOR_NAMES[allocator] for allocator in allocators)
    title = (
        f"Epoch time, {width_label(args.bits)} against FP32, epochs taking turns ({dataset}; "
        f"{device_title(args.device)}, {names} allocator{'s' if len(allocators) > 1 else ''})"
    )
    section = section_name("epoch-time", args.device, dataset)
    publish_section(section, title, body, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
