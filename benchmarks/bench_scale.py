"""Scale: per synthetic graph size, ingest throughput and memory, and each training mode's peak memory,
step time and whether it trains at all within a memory limit.

    python -m benchmarks.bench_scale [--sizes 100k,1m,10m,100m] [--modes fp32-whole,int2-whole,
        int2-sampled,int2-partitioned,int2-offloaded] [--model kgat] [--steps 5] [--threads 1]
        [--memory-limit 16GB] [--device auto|cpu|cuda] [--eval-users 20000] [--set KEY=VALUE ...]
        [--train-epochs N [--train-max-batches N]
        [--train-modes M,M]] [--budget-s S] [--work-dir DIR] [--no-write] [--section-tag TAG]

A size is the graph's triples + interactions (`100k`, `1m`, `10m`, `100m`: 10k to 10M entities),
made by `kg_data.synthetic` in a child process and ingested by `python -m pipelines.ingest` in
another (its MB/s of raw text and peak RSS). Then each mode (`_scale_report.MODES`: whole-graph FP32
and INT2, sampled, partitioned and offloaded INT2; whole-graph FP32 and INT2 with `--adam-state
bfloat16` or `rowwise`, sampled and offloaded INT2 with `bfloat16`, when named) trains `--steps` CF steps of one epoch, and ranks the valid and test users, in
a fresh `python -m pipelines.train` child whose resident set may not pass `--memory-limit` (on CPU,
`run_child`'s watchdog of its resident high-water mark; on CUDA a run fits when its
`cuda_max_memory_allocated` is within the limit): its peak RSS, seconds per step, activation bytes
and step memory breakdown (metrics.json). A child that goes over the limit or fails to allocate
(MemoryError, a refused torch or Rust allocation, a kill) *does not fit*; a mode that does not fit
at a size is not tried at larger ones. The modes take turns at each size, so load from other
processes hits them alike (FP32 always first, so a `--budget-s` never leaves out the baseline); on
CUDA one unreported step first lets Triton compile the codec outside every cell. Section
`scale-<device>` (`scale-<tag>-<device>` with `--section-tag`), with a figure of graph
size against peak memory per mode and the limit as a line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from benchmarks._cli import comma_list
from benchmarks._report import (
    REPO_ROOT,
    figure_name,
    figures_dir_for,
    publish_section,
    section_name,
)
from benchmarks._scale_report import (
    DEFAULT_MODES,
    MODES,
    SizePreset,
    parse_size_preset,
    plot,
    report,
)

DEFAULT_SIZES = "100k,1m,10m,100m"
#: what a child that ran out of memory leaves on stderr (Python, torch's CPU allocator, glibc, Rust)
OUT_OF_MEMORY = re.compile(
    r"MemoryError|can't allocate memory|Cannot allocate memory|out of memory|"
    r"memory allocation of \d+ bytes failed|std::bad_alloc",
    re.IGNORECASE,
)


#: how a process short of memory dies without a word: the OOM killer, an abort on a failed
#: allocation (Rust, C++), a fault on a failed one
MEMORY_SIGNALS = {signal.SIGKILL, signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS}


class OutOfMemory(Exception):
    """A child process went over the memory limit or failed for want of memory."""


#: how often the watchdog reads a limited child's resident set (seconds)
RSS_POLL_SECONDS = 0.05


def resident_peak(pid: int) -> int | None:
    """The high-water mark of `pid`'s resident set since its exec (`VmHWM`), in bytes; None once
    it is gone. Unlike `wait4`'s `ru_maxrss` it leaves out the pages of the forked copy of the
    parent that the child started as, which Linux folds into `ru_maxrss` at exec."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def run_child(command: list[str], log: Path, limit: int | None) -> dict:
    """Run `command` (stdout and stderr into `log`.out/.err), its resident set held to `limit`
    bytes (None: no limit); its seconds and peak RSS. A watchdog reads the child's own resident
    high-water mark (`resident_peak`) every `RSS_POLL_SECONDS` and kills the child once it passes
    the limit, so what fits is a peak RSS within the limit, as a cgroup's memory limit would count
    it, not the address space the allocators reserve (`RLIMIT_DATA` counted that, and refused runs
    whose RSS was 30% under the limit). A child gone before the first read is measured by `wait4`.
    Raises `OutOfMemory` when it went over or failed to allocate, RuntimeError for any other
    failure."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    over, seen = False, 0
    with open(f"{log}.out", "w") as out, open(f"{log}.err", "w") as err:
        child = subprocess.Popen(command, cwd=REPO_ROOT, stdout=out, stderr=err, env=env)
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            seen = max(seen, resident_peak(child.pid) or 0)
            if limit is not None and seen > limit and not over:
                over = True
                child.kill()
            time.sleep(RSS_POLL_SECONDS)
        child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    peak = seen or usage.ru_maxrss * 1024
    if over or (limit is not None and peak > limit):
        raise OutOfMemory(f"resident set over the limit (peak {peak / 2**20:,.0f} MiB or more)")
    stdout, stderr = Path(f"{log}.out").read_text(), Path(f"{log}.err").read_text()
    if child.returncode != 0:
        if -child.returncode in MEMORY_SIGNALS:
            raise OutOfMemory(f"killed by {signal.Signals(-child.returncode).name}")
        if OUT_OF_MEMORY.search(stderr):
            raise OutOfMemory("allocation failed")
        raise RuntimeError(f"{' '.join(command)} failed ({child.returncode}):\n{stderr[-3000:]}")
    return {"seconds": seconds, "peak_rss_bytes": peak, "stdout": stdout}


def generate(preset: SizePreset, raw: Path) -> None:
    """The preset's raw KGAT files in `raw`, made in a child process (its memory is not ours)."""
    command = [sys.executable, "-m", "benchmarks.bench_scale", "--generate", preset.name, str(raw)]
    run_child(command, raw.with_suffix(".generate"), limit=None)


def ingest(preset: SizePreset, raw: Path, data: Path) -> dict:
    """`python -m pipelines.ingest` of `raw` into `data` in a child: sizes, MB/s inputs, peak RSS."""
    command = [sys.executable, "-m", "pipelines.ingest", str(raw), "--out", str(data),
               "--overwrite", "--no-progress"]  # fmt: skip
    done = run_child(command, data.with_suffix(".ingest"), limit=None)
    own = re.search(r"^seconds\s+([0-9.]+)\s*$", done["stdout"], re.MULTILINE)
    meta = json.loads((data / "metadata.json").read_text())
    return {
        "size": preset.name,
        "n_entities": meta["n_entities"],
        "n_items": meta["n_items"],
        "n_triples": meta["n_triples"],
        "n_interactions": sum(meta["n_interactions"].values()),
        "n_train": meta["n_interactions"]["train"],
        "raw_bytes": sum(source["bytes"] for source in meta["sources"].values()),
        "ingest_seconds": float(own.group(1)) if own else done["seconds"],
        "process_seconds": done["seconds"],
        "peak_rss_bytes": done["peak_rss_bytes"],
    }


def train_child(
    mode: str, data: Path, out: Path, args: argparse.Namespace, flags: list[str]
) -> tuple[dict, dict | None]:
    """`python -m pipelines.train` of `mode` with `flags` in a fresh child under the memory limit
    (on CPU): (its seconds and peak RSS, its metrics.json), or ({"failure": why}, None) when it ran
    out of memory."""
    command = [
        sys.executable, "-m", "pipelines.train", "--data", str(data), "--out", str(out),
        "--model", args.model, "--threads", str(args.threads), "--device", args.device,
        "--no-mlflow", *flags, *MODES[mode],
    ]  # fmt: skip
    if args.settings:  # TrainConfig fields, read by the child as its --config (flags win)
        settings = out.parent / f"{out.name}.settings.yaml"
        settings.write_text(yaml.safe_dump(args.settings))
        command += ["--config", str(settings)]
    if args.eval_users:
        command += ["--eval-users", str(args.eval_users)]
    cpu_limit = args.memory_limit if args.device != "cuda" else None
    try:
        done = run_child(command, out.with_suffix(".train"), limit=cpu_limit)
    except OutOfMemory as exc:
        return {"failure": str(exc)}, None
    return done, json.loads((out / "metrics.json").read_text())


def train(mode: str, data: Path, out: Path, args: argparse.Namespace, n_train: int) -> dict:
    """One mode's `--steps` CF steps (one epoch, then the ranking): memory and step time."""
    flags = ["--epochs", "1", "--max-batches-per-epoch", str(args.steps)]
    done, metrics = train_child(mode, data, out, args, flags)
    result = {"mode": mode, "fits": metrics is not None}
    if metrics is None:
        return {**result, **done}
    steps = min(args.steps, math.ceil(n_train / metrics["config"]["batch_size"]))
    cuda_peak = metrics.get("cuda_max_memory_allocated")
    result.update(
        peak_rss_bytes=done["peak_rss_bytes"],
        seconds_per_step=metrics["epoch_seconds"][0] / steps,
        activation_bytes=metrics.get("activation_bytes"),
        memory_breakdown=metrics.get("memory_breakdown"),
        cuda_max_memory_allocated=cuda_peak,
        process_seconds=done["seconds"],
    )
    if cuda_peak is not None and cuda_peak > args.memory_limit:
        result.update(fits=False, failure="CUDA memory over the limit")
    return result


def warm_up_kernels(data: Path, work: Path, args: argparse.Namespace) -> None:
    """On CUDA, one unreported CF step of the first compressed mode first: Triton compiles the
    codec's kernels in the first process that quantizes (its on-disk cache serves the later ones,
    whatever their mode), which would otherwise land in whichever compressed run comes first (2.85 s
    per step at 1m against 0.76 at 10m, on an H200)."""
    compressed = [mode for mode in args.modes if MODES[mode][:2] != ["--bits", "32"]]
    if args.device != "cuda" or not compressed:
        return
    out = work / "warm-up"
    train_child(compressed[0], data, out, args, ["--epochs", "1", "--max-batches-per-epoch", "1"])
    shutil.rmtree(out, ignore_errors=True)


def mode_order(modes: list[str], index: int) -> list[str]:
    """The order of the modes at the `index`-th size: reversed at every other size, so load from
    other work hits them alike, but FP32 first at every size, so a `--budget-s` that ends inside a
    size never leaves out the baselines (the wall the other modes are measured against, at each
    Adam state named)."""
    baseline = [mode for mode in modes if mode.startswith("fp32-")]
    rest = [mode for mode in modes if not mode.startswith("fp32-")]
    return baseline + (rest if index % 2 == 0 else rest[::-1])


clock = time.monotonic  # --budget-s reads it (a test steps it)


def run(args: argparse.Namespace, work: Path) -> tuple[list[dict], list[dict], list[dict], bool]:
    """Every size in turn: generate, ingest, then the modes in turn (`mode_order`: FP32 first, the
    rest alternating); a mode that did not fit is not tried at larger sizes. At the last size, with
    `--train-epochs`, a full training of each mode that fit there (`train_to_recall`). The last
    value says whether `--budget-s` stopped it."""
    from tqdm import tqdm

    ingests, results, trainings, over = [], [], [], set()
    started, stopped = clock(), False

    def out_of_time() -> bool:
        nonlocal stopped
        stopped = bool(args.budget_s) and clock() - started > args.budget_s
        return stopped

    progress = tqdm(total=len(args.sizes) * (1 + len(args.modes)), desc="scale", disable=None)
    for index, preset in enumerate(args.sizes):
        if out_of_time():
            break
        raw, data = work / f"{preset.name}-raw", work / f"{preset.name}-data"
        generate(preset, raw)
        ingests.append(ingest(preset, raw, data))
        shutil.rmtree(raw)
        progress.update()
        if index == 0:
            warm_up_kernels(data, work, args)
        modes = mode_order(args.modes, index)
        for mode in modes:
            if out_of_time():
                break
            if mode in over:
                results.append({"size": preset.name, "mode": mode, "fits": False,
                                "failure": "did not fit a smaller size"})  # fmt: skip
            else:
                out = work / f"{preset.name}-{mode}"
                result = {
                    "size": preset.name,
                    **train(mode, data, out, args, ingests[-1]["n_train"]),
                }
                results.append(result)
                if not result["fits"]:
                    over.add(mode)
                shutil.rmtree(out, ignore_errors=True)
            progress.update()
            progress.write(f"{preset.name} {mode}: {brief(results[-1])}")
        if preset is args.sizes[-1] and args.train_epochs and not out_of_time():
            fitted = [
                m for m in args.train_modes or args.modes if m in args.modes and m not in over
            ]
            for mode in fitted:
                trainings.append({"size": preset.name, **train_to_recall(mode, data, work, args)})
                progress.write(f"{preset.name} {mode} trained: {trainings[-1]}")
        shutil.rmtree(data)
    progress.close()
    return ingests, results, trainings, stopped


def train_to_recall(mode: str, data: Path, work: Path, args: argparse.Namespace) -> dict:
    """`--train-epochs` full epochs of `mode` (all batches, the valid ranking after each) under the
    limit: the test Recall@20 and NDCG@20 of the best valid epoch, peak RSS, minutes, and the
    most-popular ranking's test Recall@20 on the same users (metrics.json's `most_popular`, the bar
    a trained model must clear)."""
    out = work / f"full-{mode}"
    flags = ["--epochs", str(args.train_epochs)]
    if args.train_max_batches:
        flags += ["--max-batches-per-epoch", str(args.train_max_batches)]
    done, metrics = train_child(mode, data, out, args, flags)
    shutil.rmtree(out, ignore_errors=True)
    if metrics is None:
        return {"mode": mode, "fits": False, **done}
    return {
        "mode": mode, "fits": True, "epochs": metrics["epochs_trained"],
        "recall@20": metrics["recall@20"], "ndcg@20": metrics["ndcg@20"],
        "popular_recall@20": metrics["most_popular"]["recall@20"],
        "peak_rss_bytes": done["peak_rss_bytes"], "minutes": done["seconds"] / 60,
    }  # fmt: skip


def brief(result: dict) -> str:
    if not result["fits"]:
        return f"does not fit ({result['failure']})"
    return f"peak RSS {result['peak_rss_bytes'] / 2**20:,.0f} MiB, {result['seconds_per_step']:.2f} s/step"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from tinykg_train.config import TrainConfig, parse_size
    from tinykg_train.errors import ConfigError

    def size_list(text: str) -> list[SizePreset]:
        try:
            return [parse_size_preset(part) for part in comma_list()(text)]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    def setting(text: str) -> str:
        key, sep, value = text.partition("=")
        if not (sep and key.strip() and value.strip()):
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE (got {text!r})")
        if key.strip() not in TrainConfig.field_names():
            raise argparse.ArgumentTypeError(
                f"{key.strip()!r} is not a training setting; use one of config.yaml's fields "
                "(e.g. embed_dim)"
            )
        return f"{key.strip()}={value.strip()}"

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--sizes", type=size_list, default=size_list(DEFAULT_SIZES),
                        help=f"graph sizes, triples + interactions (default {DEFAULT_SIZES})")  # fmt: skip
    parser.add_argument("--modes", type=comma_list(choices=list(MODES)), default=DEFAULT_MODES,
                        help=f"training modes of {', '.join(MODES)} (default: {', '.join(DEFAULT_MODES)})")  # fmt: skip
    parser.add_argument("--model", default="kgat", help="model every mode trains (default kgat)")
    parser.add_argument("--steps", type=int, default=5, help="CF steps per run (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    parser.add_argument("--memory-limit", default="16GB",
                        help="peak resident set each training child may reach, e.g. 3GB (default 16GB)")  # fmt: skip
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--set", type=setting, action="append", default=[], metavar="KEY=VALUE",
                        help="a training setting (a config.yaml field) every child gets, e.g. "
                        "embed_dim=32 for a graph whose tables would not fit; repeatable")  # fmt: skip
    parser.add_argument("--train-epochs", type=int, default=0,
                        help="then train the modes that fit the largest size for N full epochs "
                        "and report their test Recall@20 (default 0: skip)")  # fmt: skip
    parser.add_argument("--train-modes", type=comma_list(choices=list(MODES)),
                        help="--train-epochs: only these modes (default: every mode that fit)")  # fmt: skip
    parser.add_argument("--eval-users", type=int, default=20_000,
                        help="users each ranking scores against every item, a seeded sample "
                        "(default 20000; 0: every user, ~6 min per ranking at 10m on one core)")  # fmt: skip
    parser.add_argument("--train-max-batches", type=int, default=0,
                        help="--train-epochs: at most N CF batches per epoch, for sizes whose full "
                        "epoch would take hours on the machine (default 0: every batch)")  # fmt: skip
    parser.add_argument(
        "--work-dir", type=Path, help="for the datasets and runs (default: a temp dir)"
    )
    parser.add_argument("--no-write", dest="write", action="store_false",
                        help="print the report; leave BENCHMARKS.md and the figures alone")  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=0,
                        help="start no new size or run after this many seconds and report what "
                        "ran (default 0: no limit)")  # fmt: skip
    parser.add_argument("--section-tag",
                        help="write section scale-<tag>-<device> (and its figure) instead of "
                        "scale-<device>, so a partial run stands beside the full one")  # fmt: skip
    parser.add_argument("--generate", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.settings = {
        key: yaml.safe_load(value) for key, _, value in (text.partition("=") for text in args.set)
    }
    args.memory_limit_text = args.memory_limit
    try:
        args.memory_limit = parse_size(args.memory_limit, "--memory-limit")
    except ConfigError as exc:
        parser.error(str(exc))
    if (
        args.steps < 1
        or args.threads < 1
        or min(args.train_epochs, args.train_max_batches, args.eval_users, args.budget_s) < 0
    ):
        parser.error(
            "--steps and --threads need to be at least 1, --train-epochs, --train-max-batches, "
            "--eval-users and --budget-s at least 0"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.generate:  # the child `generate` starts
        from kg_data.synthetic import write_synthetic_kgat

        preset, raw = parse_size_preset(args.generate[0]), Path(args.generate[1])
        write_synthetic_kgat(raw, **preset.generator_kwargs())
        return 0
    from tinykg_train.device import resolve_device

    args.device = resolve_device(args.device).type
    figures = figures_dir_for(args.write)
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        ingests, results, trainings, stopped = run(args, work)
    section = section_name("scale", args.device, args.section_tag)
    figure = None
    if figures is not None:
        name = figure_name(section)
        plot(results, ingests, args.modes, args.memory_limit, figures / name)
        figure = f"benchmarks/figures/{name}"
    settings = {"model": args.model, "steps": args.steps, "threads": args.threads,
                "train_epochs": args.train_epochs, "train_max_batches": args.train_max_batches,
                "eval_users": args.eval_users, "device": args.device, "sets": args.set,
                "budget_s": f"{args.budget_s:g}",
                "stopped_by_budget": stopped,
                "memory_limit": args.memory_limit, "memory_limit_text": args.memory_limit_text}  # fmt: skip
    body = report(results, ingests, args.modes, settings, figure, trainings)
    print(body)
    publish_section(section, f"Scale: graph size against training memory ({args.device})", body,
                    write=args.write)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
