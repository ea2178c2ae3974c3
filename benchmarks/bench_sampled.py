"""Sampled training against whole-graph training: one CF step's memory and time, per model.

    python -m benchmarks.bench_sampled [--dataset lfm1m-kgat] [--models kgat,kgin] [--bits 2]
        [--fanouts 10,10,10] [--batch-sizes 2048] [--warmup 2] [--steps 5] [--rounds 2]
        [--device auto|cpu|cuda] [--no-write]

Each (model, batch size, mode) runs in its own process (its own allocator and peak RSS): the
trainer's session (`open_session`, default sizes but for `--bits`, `--batch-size` and the sampling
settings), then the trainer's step on the epoch's batches (`SampledBatches` and its background
sampler for the sampled mode), `--warmup` steps unmeasured, then `--steps` measured ones. Per mode:
the bytes the first measured step holds for backward (`ActivationMeter`, as metrics.json's
`activation_bytes`), the process's resident-set high-water mark during the measured steps
(`VmHWM` reset by `/proc/self/clear_refs` first, so building the model does not count; on Linux),
that mark less the RSS before those steps, on CUDA the allocator's peak during them less what was
allocated before, seconds per step (median; the wait for the sampler included) and how much of it
was waiting for the sampler, and the nodes a step propagates over. The modes run in turn,
`--rounds` times, so load from other processes hits them alike; the figures are each mode's medians.
Section `sampled-training-<dataset>-<device>`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks._cli import comma_list, run_checked
from benchmarks._datasets import DatasetUnavailable, resolve_dataset
from benchmarks._report import markdown_table, mib, publish_section, width_label

MODES = ("whole-graph", "sampled")


def proc_status_kib(field: str) -> int | None:
    try:
        match = re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text())
    except OSError:
        return None
    return int(match.group(1)) if match else None


def reset_rss_peak() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def measure(spec: dict) -> dict:
    """One mode's figures (runs in the worker process)."""
    import torch

    from tinykg_train.compress import ActivationMeter, compress_saved_tensors
    from tinykg_train.config import TrainConfig
    from tinykg_train.device import resolve_device
    from tinykg_train.epoch import synchronize
    from tinykg_train.session import open_session

    sampled = spec["mode"] == "sampled"
    device = resolve_device(spec["device"])
    with tempfile.TemporaryDirectory(prefix="bench_sampled_") as tmp:
        config = TrainConfig(
            data=spec["data"],
            model=spec["model"],
            bits=spec["bits"],
            batch_size=spec["batch_size"],
            n_layers=len(spec["fanouts"]),
            sampler="neighbor" if sampled else "none",
            fanouts=spec["fanouts"] if sampled else None,
            device=device.type,
            out=str(Path(tmp) / "run"),
        )
        session = open_session(config, device)
    model, optimizer = session.model, session.optimizer
    model.train()
    model.on_epoch_start(0)
    source = session.sampled if sampled else session.cf_batches
    loss_fn = session.sampled.cf_loss if sampled else model.loss
    running = session.sampled.running(0) if sampled else contextlib.nullcontext()
    seconds, waits, nodes = [], [], []
    activation_bytes = rss_before = cuda_before = None
    with running:
        batches = iter(source.epoch(0))
        for index in range(spec["warmup"] + spec["steps"]):
            measured = index >= spec["warmup"]
            if index == spec["warmup"]:
                rss_before = proc_status_kib("VmRSS")
                reset_rss_peak()
                if device.type == "cuda":
                    cuda_before = torch.cuda.memory_allocated(device)
                    torch.cuda.reset_peak_memory_stats(device)
            synchronize(device)
            start = time.perf_counter()
            waited = session.sampled.wait_seconds if sampled else 0.0
            batch = [t.to(device, non_blocking=True) for t in next(batches)]
            optimizer.zero_grad(set_to_none=True)
            with compress_saved_tensors(session.compression):
                if index == spec["warmup"]:
                    with ActivationMeter(model) as meter:
                        loss = loss_fn(*batch)
                    activation_bytes = int(meter.total_bytes)
                else:
                    loss = loss_fn(*batch)
                loss.backward()
            optimizer.step()
            synchronize(device)
            if measured:
                seconds.append(time.perf_counter() - start)
                waits.append((session.sampled.wait_seconds if sampled else 0.0) - waited)
                nodes.append(batch[3].num_nodes if sampled else None)
    hwm = proc_status_kib("VmHWM")
    return {
        **spec,
        "activation_bytes": activation_bytes,
        "step_peak_rss_bytes": None if hwm is None else hwm * 1024,
        "rss_before_bytes": None if rss_before is None else rss_before * 1024,
        "cuda_step_peak_bytes": None
        if cuda_before is None
        else int(torch.cuda.max_memory_allocated(device) - cuda_before),
        "step_seconds": seconds,
        "wait_seconds": waits,
        "nodes_per_step": statistics.mean(nodes) if sampled else None,
    }


def run_worker(spec: dict) -> dict:
    """`measure(spec)` in a fresh process (its own peak RSS and allocator)."""
    command = [sys.executable, "-m", "benchmarks.bench_sampled", "--worker", json.dumps(spec)]
    stdout = run_checked(command, f"worker {spec}")
    return json.loads(stdout.strip().splitlines()[-1])


def report(results: list[dict], num_nodes: int) -> str:
    rows = []
    for result in results:
        seconds = statistics.median(result["step_seconds"])
        wait = statistics.median(result["wait_seconds"])
        peak = result["step_peak_rss_bytes"]
        rise = None if peak is None else peak - result["rss_before_bytes"]
        fanouts = ",".join(map(str, result["fanouts"])) if result["mode"] == "sampled" else "all"
        nodes = result["nodes_per_step"]
        rows.append(
            [
                result["model"],
                width_label(result["bits"]),
                result["batch_size"],
                result["mode"],
                fanouts,
                f"{nodes:,.0f}" if nodes is not None else f"{num_nodes:,}",
                mib(result["activation_bytes"]),
                mib(peak),
                mib(rise),
                mib(result["cuda_step_peak_bytes"]),
                f"{seconds:.2f}",
                f"{wait:.3f}",
            ]
        )
    headers = [
        "model", "bits", "batch", "mode", "fanouts", "nodes per step", "activation MiB",
        "step peak RSS MiB", "RSS rise in step MiB", "CUDA step peak MiB", "s / step",
        "sampler wait s / step",
    ]  # fmt: skip
    return markdown_table(headers, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_sampled", description=__doc__)
    parser.add_argument("--dataset", default="lfm1m-kgat")
    parser.add_argument("--models", type=comma_list(), default=["kgat", "kgin"])
    parser.add_argument("--bits", type=int, default=2)
    parser.add_argument("--fanouts", type=comma_list(int), default=[10, 10, 10])
    parser.add_argument("--batch-sizes", type=comma_list(int), default=[2048])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--no-write", dest="write", action="store_false")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure(json.loads(args.worker))))
        return 0
    try:
        label, data = resolve_dataset(args.dataset)
    except DatasetUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from kg_data import CKG
    from tinykg_train.device import resolve_device

    device = resolve_device(args.device)
    specs = [
        dict(data=str(data), model=model, bits=args.bits, batch_size=batch_size, mode=mode,
             fanouts=args.fanouts, warmup=args.warmup, steps=args.steps, device=device.type)
        for model in args.models
        for batch_size in args.batch_sizes
        for mode in MODES
    ]  # fmt: skip
    runs: dict[int, list[dict]] = {i: [] for i in range(len(specs))}
    for round_index in range(args.rounds):
        order = range(len(specs)) if round_index % 2 == 0 else reversed(range(len(specs)))
        for i in order:
            runs[i].append(run_worker(specs[i]))
            print(f"round {round_index}: {specs[i]['model']} {specs[i]['mode']} done", flush=True)
    results = []
    for i in range(len(specs)):
        merged = dict(runs[i][0])
        for key in ("step_seconds", "wait_seconds"):
            merged[key] = [s for run in runs[i] for s in run[key]]
        for key in ("step_peak_rss_bytes", "cuda_step_peak_bytes", "rss_before_bytes"):
            values = [run[key] for run in runs[i] if run[key] is not None]
            merged[key] = statistics.median(values) if values else None
        results.append(merged)
    table = report(results, CKG.from_dataset(data).num_nodes)
    print(table)
    publish_section(
        f"sampled-training-{label}-{device.type}",
        f"Sampled against whole-graph training, one CF step ({label}, {device.type})",
        table,
        write=args.write,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
