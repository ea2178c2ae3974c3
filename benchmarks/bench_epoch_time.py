"""CPU epoch time of a compressed width against FP32, the two timed side by side.

A machine shared with other work (a VM, a CI runner) changes speed from minute to minute: epochs
timed in runs minutes apart can differ by a third with the code unchanged, more than the overhead
being measured. Here an FP32 and an INT`bits` training of the same model and seed run at the same
time in two worker processes, each pinned to its own core and one torch thread, started together
once both have warmed up (the first epochs compile the codec), so that what slows one slows the
other. Each pair runs again with the cores swapped. Both workers run the trainer's own
`train_epoch` (CF phase, KG phase, no evaluation) and report its `epoch_seconds`.

    python -m benchmarks.bench_epoch_time [--dataset music-kgcn] [--models kgat,kgin] [--bits 2]
        [--warmup 2] [--epochs 8] [--repeats 2] [--sequential] [--no-write]

The two share the memory bandwidth and the last-level cache, so each runs slower than alone; the
figure is the ratio. `--sequential` times the two one after the other instead (one core).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from benchmarks._cli import comma_list
from benchmarks._datasets import DatasetUnavailable, resolve_dataset
from benchmarks._report import REPO_ROOT, markdown_table, publish_section, width_label

MODELS = ("kgat", "kgin", "kgcn", "lightgcn", "bprmf")
START_TIMEOUT_S = 900  # a worker's set-up and warm-up (the first compile of the codec included)


@dataclass(frozen=True)
class Pair:
    """One side-by-side run: each width's epoch seconds and the core it ran on (None: unpinned)."""

    model: str
    cores: dict[int, int | None]
    epoch_seconds: dict[int, list[float]]

    def ratio(self, bits: int) -> float:
        return statistics.median(self.epoch_seconds[bits]) / statistics.median(
            self.epoch_seconds[32]
        )


# -- the worker: one training, timed after a barrier -------------------------------------------------


def run_worker(args: argparse.Namespace) -> int:
    """Train `args.model` at `args.bits`: warm up, say ready, wait for the go file, time epochs,
    print one JSON line."""
    import torch

    from tinykg_train.config import TrainConfig
    from tinykg_train.epoch import train_epoch
    from tinykg_train.session import open_session

    if args.core is not None:
        os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        config = TrainConfig.from_yaml(REPO_ROOT / "configs" / f"{args.model}.yaml").with_overrides(
            data=args.data, bits=args.bits, seed=0, device="cpu", out=f"{tmp}/run"
        )
        session = open_session(config, torch.device("cpu"))
        for epoch in range(args.warmup):
            train_epoch(session, epoch)
        Path(args.ready).touch()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not Path(args.go).exists():
            if time.monotonic() > deadline:
                print(f"worker {args.model} {args.bits}: no go signal", file=sys.stderr)
                return 1
            time.sleep(0.01)
        seconds = [
            train_epoch(session, epoch)["epoch_seconds"]
            for epoch in range(args.warmup, args.warmup + args.epochs)
        ]
    print(json.dumps({"bits": args.bits, "epoch_seconds": seconds}))
    return 0


# -- the driver ----------------------------------------------------------------------------------------


def _start_worker(args, bits: int, core: int | None, folder: Path) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "benchmarks.bench_epoch_time", "--worker",
        "--data", str(args.data_dir), "--models", args.model_name, "--bits", str(bits),
        "--warmup", str(args.warmup), "--epochs", str(args.epochs),
        "--ready", str(folder / f"ready-{bits}"), "--go", str(folder / "go"),
    ] + (["--core", str(core)] if core is not None else [])  # fmt: skip
    return subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)


def _result(process: subprocess.Popen) -> list[float]:
    out, _ = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(
            f"an epoch-time worker failed (exit {process.returncode}); see its stderr above"
        )
    return json.loads(out.strip().splitlines()[-1])["epoch_seconds"]


def run_pair(args, cores: tuple[int | None, int | None]) -> Pair:
    """FP32 on `cores[0]` and INT`bits` on `cores[1]`, released together (or one after the other
    when `args.sequential`)."""
    widths = (32, args.bits)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.sequential:
            (folder / "go").touch()
            seconds = {b: _result(_start_worker(args, b, c, folder)) for b, c in zip(widths, cores, strict=True)}
        else:
            workers = {b: _start_worker(args, b, c, folder) for b, c in zip(widths, cores, strict=True)}
            try:
                deadline = time.monotonic() + START_TIMEOUT_S
                while not all((folder / f"ready-{b}").exists() for b in widths):
                    if any(w.poll() not in (None, 0) for w in workers.values()):
                        break  # a worker died before it was ready: _result says so
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
                (folder / "go").touch()
                seconds = {b: _result(w) for b, w in workers.items()}
            finally:  # one failed: stop the other rather than leave it behind
                for worker in workers.values():
                    if worker.poll() is None:
                        worker.kill()
                        worker.wait()
    return Pair(args.model_name, dict(zip(widths, cores, strict=True)), seconds)


def core_pairs(repeats: int, sequential: bool) -> list[tuple[int | None, int | None]]:
    """Which cores FP32 and the compressed width take in each repeat: two distinct cores, swapped
    every other repeat; unpinned when sequential or when fewer than two cores are available."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if sequential or len(allowed) < 2:
        return [(None, None)] * repeats
    first, second = allowed[:2]
    return [(first, second) if r % 2 == 0 else (second, first) for r in range(repeats)]


def report(dataset: str, args, pairs: list[Pair]) -> str:
    label = width_label(args.bits)
    rows = []
    for pair in pairs:
        fp32, other = (statistics.median(pair.epoch_seconds[b]) for b in (32, args.bits))
        cores = " / ".join(
            "-" if pair.cores[b] is None else str(pair.cores[b]) for b in (32, args.bits)
        )
        rows.append(
            [pair.model, cores, f"{fp32:.3f}", f"{other:.3f}", f"{pair.ratio(args.bits):.3f}"]
        )
    table = markdown_table(
        ["model", f"cores FP32 / {label}", "FP32 epoch s", f"{label} epoch s", f"{label} / FP32"],
        rows,
    )
    lines = []
    for model in dict.fromkeys(pair.model for pair in pairs):
        ratios = [p.ratio(args.bits) for p in pairs if p.model == model]
        lines.append(
            f"- {model} {label} / FP32 epoch time: **{statistics.median(ratios):.2f}** (median of "
            f"{len(ratios)} pairs, {min(ratios):.2f} to {max(ratios):.2f}; goal <= 1.10 on CPU)"
        )
    how = (
        "one after the other, unpinned"
        if args.sequential or pairs[0].cores[32] is None
        else "side by side, each pinned to its own core, cores swapped every other pair"
    )
    return (
        f"{dataset}, the models' `configs/<model>.yaml`, seed 0, one torch thread per training, "
        f"{args.warmup} warm-up epochs, then {args.epochs} timed epochs per training ({how}). "
        "*epoch s*: median of the timed epochs' `epoch_seconds` (the trainer's `train_epoch`: CF "
        "and KG phases, no evaluation).\n\n"
        f"{table}\n\n" + "\n".join(lines) + "\n"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_epoch_time",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", default="music-kgcn", help="a ../shared/data name or a dir")
    parser.add_argument("--models", type=comma_list(choices=MODELS), default=["kgat", "kgin"])
    parser.add_argument(
        "--bits", type=int, choices=(1, 2, 4, 8, 32), default=2, help="against FP32"
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed epochs first (compiles)")
    parser.add_argument("--epochs", type=int, default=8, help="timed epochs per training")
    parser.add_argument("--repeats", type=int, default=2, help="pairs per model (cores swapped)")
    parser.add_argument(
        "--sequential", action="store_true", help="time the two one after the other"
    )
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    for hidden in ("--data", "--ready", "--go"):  # the worker's
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        args.model = args.models[0]
        return run_worker(args)
    if args.bits == 32:
        print(
            "--bits needs a compressed width (1, 2, 4 or 8): it is timed against FP32",
            file=sys.stderr,
        )
        return 2
    for name in ("warmup", "epochs", "repeats"):
        low = 0 if name == "warmup" else 1
        if getattr(args, name) < low:
            print(
                f"--{name} needs to be at least {low} (got {getattr(args, name)})", file=sys.stderr
            )
            return 2
    try:
        dataset, args.data_dir = resolve_dataset(args.dataset)
    except DatasetUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    cores = core_pairs(args.repeats, args.sequential)
    pairs = []
    for model in tqdm(args.models, desc="models", disable=None):
        args.model_name = model
        pairs += [run_pair(args, pair) for pair in cores]
    body = report(dataset, args, pairs)
    print(body)
    title = f"Epoch time, {width_label(args.bits)} against FP32 side by side ({dataset}; CPU)"
    publish_section("epoch-time-cpu", title, body, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
