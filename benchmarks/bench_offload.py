"""Embedding tables in host memory (`--offload-embeddings`) against tables on the device.

    python -m benchmarks.bench_offload [--dataset lfm1m-kgat] [--model kgat] [--bits 2]
        [--epochs 1] [--max-batches 200] [--rounds 2] [--device auto|cpu|cuda] [--threads 1]
        [--no-write]

Both modes train the same model, seed and sampled batches (`--sampler neighbor`) with row-wise
Adam updates of the tables: *on device* keeps the tables and their Adam state on the training
device (`--sparse-adam`), *offloaded* keeps them in (pinned) host memory behind a device cache with
look-ahead prefetch (`--offload-embeddings`). Each run is a fresh `python -m pipelines.train` child;
the modes take turns, the order reversing every other round, so load from other processes hits them
alike. Per mode, from its runs' metrics.json: test Recall@20 and NDCG@20 (the offloaded updates are
the on-device ones, so the two should agree), seconds per epoch (median; the ratio per round too),
the device peak (`cuda_max_memory_allocated`) or, on the CPU, the peak RSS, the bytes the row tables
hold on the device and on the host, and the device cache's hits and misses.
Section `offload-<dataset>-<device>`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks._cli import add_device_options, missing_cuda, run_checked
from benchmarks._datasets import DatasetUnavailable, resolve_dataset
from benchmarks._report import (
    markdown_table,
    mib,
    publish_section,
    section_name,
    width_label,
)

MODES = {"on device": ["--sparse-adam"], "offloaded": ["--offload-embeddings"]}


def train_command(mode: str, data: Path, out: Path, args: argparse.Namespace) -> list[str]:
    """The `pipelines.train` command line of one run of `mode`."""
    command = [
        sys.executable, "-m", "pipelines.train", "--model", args.model, "--data", str(data),
        "--bits", str(args.bits), "--epochs", str(args.epochs), "--seed", str(args.seed),
        "--sampler", "neighbor", "--device", args.device, "--no-mlflow", "--out", str(out),
        *MODES[mode],
    ]  # fmt: skip
    if args.max_batches:
        command += ["--max-batches-per-epoch", str(args.max_batches)]
    if args.threads:
        command += ["--threads", str(args.threads)]
    return command


def run_mode(mode: str, data: Path, work: Path, args: argparse.Namespace, index: int) -> dict:
    """One fresh training of `mode`; its metrics.json. A failed run raises with its stderr's tail."""
    out = work / f"{mode.replace(' ', '-')}-{index}"
    run_checked(train_command(mode, data, out, args), f"{mode} run")
    return json.loads((out / "metrics.json").read_text())


def run_rounds(data: Path, args: argparse.Namespace) -> dict[str, list[dict]]:
    """`args.rounds` rounds of both modes, the order reversing every other round."""
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="bench_offload_") as tmp:
        for index in range(args.rounds):
            order = list(MODES) if index % 2 == 0 else list(reversed(MODES))
            for mode in order:
                print(f"round {index + 1}/{args.rounds}: {mode}", flush=True)
                runs[mode].append(run_mode(mode, data, Path(tmp), args, index))
    return runs


def epoch_seconds(run: dict) -> float:
    return statistics.median(run["epoch_seconds"])


def mode_row(mode: str, runs: list[dict], epoch: float, peak: int) -> list[object]:
    """One mode's table row: accuracy per round, its median epoch and peak, where the tables
    live."""
    memory = runs[0]["row_tables"]["memory"]
    stats = [s for name, s in runs[0]["row_tables"]["stats"].items() if name != "all"]
    hits, misses = sum(s.get("hits", 0) for s in stats), sum(s.get("misses", 0) for s in stats)
    return [
        mode,
        " / ".join(f"{run['recall@20']:.4f}" for run in runs),
        " / ".join(f"{run['ndcg@20']:.4f}" for run in runs),
        f"{epoch:.2f}",
        mib(peak),
        mib(memory["device_tables"] + memory["device_optimizer"]),
        mib(memory["host_tables"] + memory["host_optimizer"] + memory["host_index"]),
        f"{hits:,} / {misses:,}" if hits or misses else "n/a",
    ]


def peak_key(device: str) -> str:
    """The metrics.json peak a mode is compared by: the device's on CUDA, else the process's."""
    return "cuda_max_memory_allocated" if device == "cuda" else "peak_rss_bytes"


def report(runs: dict[str, list[dict]], dataset: str, args: argparse.Namespace) -> str:
    """The section body: the setup, a row per mode, and the ratios the issue asks for."""
    device = args.device
    peak_name = "CUDA max allocated MiB" if device == "cuda" else "peak RSS MiB"
    headers = [
        "mode", "test Recall@20 (per round)", "test NDCG@20 (per round)", "epoch s (median)",
        peak_name, "tables + Adam on device MiB", "tables + Adam + index on host MiB",
        "cache hits / misses (first run)",
    ]  # fmt: skip
    epochs = {mode: statistics.median(map(epoch_seconds, done)) for mode, done in runs.items()}
    peaks = {mode: max(run[peak_key(device)] or 0 for run in done) for mode, done in runs.items()}
    rows = [mode_row(mode, done, epochs[mode], peaks[mode]) for mode, done in runs.items()]
    on_device, offloaded = runs["on device"], runs["offloaded"]
    pairs = list(zip(on_device, offloaded, strict=True))
    per_round = [epoch_seconds(b) / epoch_seconds(a) for a, b in pairs]
    ratio = epochs["offloaded"] / epochs["on device"]
    recall_gap = max(abs(a["recall@20"] - b["recall@20"]) for a, b in pairs)
    setup = (
        f"{dataset}, model {args.model} at {width_label(args.bits)}, seed {args.seed}, sampled "
        f"training (`--sampler neighbor`), {args.epochs} epoch(s)"
        + (f" of the first {args.max_batches} CF batches" if args.max_batches else "")
        + f", on {device}; {args.rounds} round(s) of a fresh `pipelines.train` run per mode, the "
        "order reversing every other round. *on device*: `--sparse-adam` (tables and their Adam "
        "state on the device, row-wise updates); *offloaded*: `--offload-embeddings` (tables and "
        "Adam state in host memory, a device cache of the rows the next batches need). Memory of "
        "the row tables from metrics.json's `row_tables`; the peak is the whole run's "
        + ("device peak (`cuda_max_memory_allocated`)." if device == "cuda" else "peak RSS.")
    )
    lines = [
        setup,
        "",
        markdown_table(headers, rows),
        "",
        f"- offloaded / on device, epoch time: **{ratio:.2f}** (per round "
        + ", ".join(f"{r:.2f}" for r in per_round)
        + ")",
        f"- {'device' if device == 'cuda' else 'process'} peak, on device / offloaded: "
        f"**{peaks['on device'] / max(peaks['offloaded'], 1):.2f}x** "
        f"({mib(peaks['on device'])} against {mib(peaks['offloaded'])} MiB)",
        f"- largest test Recall@20 difference between the modes in a round: {recall_gap:.4f}",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_offload", description=__doc__)
    parser.add_argument("--dataset", default="lfm1m-kgat")
    parser.add_argument("--model", default="kgat")
    parser.add_argument("--bits", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--max-batches", type=int, default=200, help="CF batches per epoch (0: all)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    add_device_options(parser)
    parser.add_argument("--no-write", dest="write", action="store_false")
    args = parser.parse_args(argv)
    for name in ("epochs", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1 (got {getattr(args, name)})")
    if args.max_batches < 0:
        parser.error(f"--max-batches must be 0 (all) or more (got {args.max_batches})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    problem = missing_cuda(args.device)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.threads is None:
        args.threads = 1
    try:
        dataset, data = resolve_dataset(args.dataset)
    except DatasetUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        runs = run_rounds(data, args)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    body = report(runs, dataset, args)
    print(body)
    title = f"Embedding tables offloaded to host memory against on the device ({dataset}; {args.device})"
    publish_section(section_name("offload", args.device, dataset), title, body, write=args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
