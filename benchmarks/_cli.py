"""Command-line pieces shared by the training benchmarks (bench_memory, bench_accuracy, ...)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence


def comma_list(kind: Callable = str, choices: Sequence | None = None) -> Callable[[str], list]:
    """An argparse type for comma-separated values (`32,2`), each checked against `choices`."""

    def parse(text: str) -> list:
        try:
            values = [kind(v.strip()) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list (got {text!r})")
        if choices is not None and any(v not in choices for v in values):
            raise argparse.ArgumentTypeError(
                f"choose from {', '.join(map(str, choices))} (got {text!r})"
            )
        return values

    return parse


def add_device_options(parser: argparse.ArgumentParser) -> None:
    """`--device auto|cpu|cuda` and `--threads N`."""
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (default: torch's); on a shared machine 1 avoids OpenMP barrier waits",
    )


def missing_cuda(device: str) -> str | None:
    """The one-line error for `--device cuda` where torch sees no GPU, else None."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return "--device cuda needs a CUDA GPU, and torch sees none here; use --device cpu"
    return None


def run_checked(command: list[str], what: str) -> str:
    """Run `command` from the repository root, its output captured; its stdout, or a RuntimeError
    naming `what` with its exit status and the tail of its stderr."""
    import subprocess

    from benchmarks._report import REPO_ROOT

    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout
