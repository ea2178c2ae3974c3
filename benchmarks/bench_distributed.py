"""Data-parallel training: N Ray Train workers against one, same global batch and seeds.

    python -m benchmarks.bench_distributed [--datasets music-kgcn,ml-100k-recbole] [--models kgcn]
        [--bits 2] [--seeds 0,1,2] [--workers 2] [--epochs N] [--max-batches-per-epoch N]
        [--set [MODEL.]KEY=VALUE ...] [--out runs/bench_distributed] [--section NAME]
        [--note TEXT] [--no-write]

Every (dataset, model, seed) trains twice: on 1 worker through `tinykg_train.trainer.train` in this
process (what `pipelines.train` runs), and on `--workers` Ray Train workers through
`tinykg_train.distributed` (what `pipelines.train --workers N` runs) on one private local Ray with
one CPU per worker; settings as bench_accuracy builds them (`configs/<model>.yaml` < `--set` < the
flags). Every process trains with one torch thread, so on a machine with N cores the N workers and
the single worker each get whole cores. The two runs of a seed go one after the other, so drift of
the machine's load reaches both. Runs live in `--out/<dataset>/<model>/<width>/seed<S>/w<N>`; a
finished run is read back, not re-run (same rules as bench_accuracy). The report (paired Recall@20
difference with its 95% t interval, epoch times, speed-up and scaling efficiency) goes to section
`--section` of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks._cli import comma_list
from benchmarks._datasets import DatasetUnavailable, resolve_dataset
from benchmarks._distributed_report import Run, report
from benchmarks._report import REPO_ROOT, publish_section
from benchmarks.bench_accuracy import (
    BITS,
    Planned,
    StaleRun,
    finished,
    parse_setting,
    run_config,
    width,
)
from tinykg_train.config import MODELS

DATASETS = ("music-kgcn", "ml-100k-recbole")


@dataclass(frozen=True)
class Planned2:
    """One run: a bench_accuracy cell plus its number of workers."""

    base: Planned
    workers: int

    @property
    def label(self) -> str:
        return f"{self.base.label} on {self.workers} worker(s)"


def plan(out: Path, datasets, models, bits_list, seeds, workers: int) -> list[Planned2]:
    """Seeds outermost and the 1- and N-worker runs of a seed back to back."""
    return [
        Planned2(Planned(d, m, b, s, out / d / m / width(b) / f"seed{s}" / f"w{n}"), n)
        for d in datasets
        for s in seeds
        for m in models
        for b in bits_list
        for n in (1, workers)
    ]


class LocalRay:
    """A private local Ray with one CPU per worker, started at the first N-worker run and kept."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.stack, self.started = stack, False

    def ensure(self, workers: int) -> None:
        if not self.started:
            from tinykg_train.sweep.cluster import ray_connection

            self.stack.enter_context(ray_connection(num_cpus=workers, log_level="ERROR"))
            self.started = True


def execute(run: Planned2, config, ray: LocalRay) -> dict:
    """Train (or resume) one run: in this process, or on Ray Train workers."""
    resume = (run.base.path / "checkpoint.pt").is_file()
    config = config.with_overrides(resume=resume, workers=run.workers)
    if run.workers == 1:
        from tinykg_train.trainer import train

        return train(config)
    from tinykg_train.distributed.launch import check_inputs, run_workers, with_absolute_paths

    ray.ensure(run.workers)
    config = with_absolute_paths(config)
    check_inputs(config)
    return run_workers(config)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_distributed",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--datasets", type=comma_list(str), default=list(DATASETS))
    parser.add_argument("--models", type=comma_list(str, MODELS), default=["kgcn"])
    parser.add_argument("--bits", type=comma_list(int, BITS), default=[2])
    parser.add_argument("--seeds", type=comma_list(int), default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=2, help="Ray Train workers (default 2)")
    parser.add_argument("--epochs", type=int, help="epochs per run (default: the model's config)")
    parser.add_argument("--max-batches-per-epoch", type=int, help="cap the steps per phase")
    parser.add_argument(
        "--set",
        type=parse_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a TrainConfig setting for every run or, as MODEL.KEY=VALUE, for one model's runs",
    )
    parser.add_argument("--section", default="distributed-cpu", help="BENCHMARKS.md section")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "runs" / "bench_distributed")
    parser.add_argument("--note", default="", help="a sentence for the section (the conditions)")
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.set, args.device = dict(args.set), "cpu"
    import torch

    from tinykg_train.errors import TinyKGError

    torch.set_num_threads(1)  # Ray gives each worker OMP_NUM_THREADS = its one CPU
    if args.workers < 2:
        print(
            "--workers needs to be at least 2 (1 is the baseline every seed runs)", file=sys.stderr
        )
        return 2
    try:
        data = dict(resolve_dataset(spec) for spec in args.datasets)
        runs = plan(args.out, list(data), args.models, args.bits, args.seeds, args.workers)
        configs = {run: run_config(run.base, data[run.base.dataset], args) for run in runs}
    except (TinyKGError, DatasetUnavailable) as exc:
        print(exc, file=sys.stderr)
        return 2
    results: list[Run] = []
    with contextlib.ExitStack() as stack:
        ray = LocalRay(stack)
        for index, run in enumerate(runs, 1):
            config = configs[run].with_overrides(workers=run.workers)
            try:
                metrics = finished(run.base, config)
            except StaleRun as exc:
                print(exc, file=sys.stderr)
                return 2
            if metrics is None:
                print(f"[{index}/{len(runs)}] {run.label}: training", flush=True)
                start = time.perf_counter()
                metrics = execute(run, config, ray)
                print(
                    f"[{index}/{len(runs)}] {run.label}: recall@20 {metrics['recall@20']:.4f} "
                    f"in {time.perf_counter() - start:.0f} s",
                    flush=True,
                )
            base = run.base
            results.append(
                Run(base.dataset, base.model, base.bits, base.seed, run.workers, metrics)
            )
    title, body, table = report(results, args.note)
    print(body)
    publish_section(args.section, title, body, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
