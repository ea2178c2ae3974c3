"""Test Recall@20 / NDCG@20, epoch time and activation bytes per (dataset, model, bit width), over seeds.

    python -m benchmarks.bench_accuracy [--datasets lfm1m-kgat,music-kgcn] [--models kgat,...]
        [--bits 32,8,4,2,1] [--seeds 0,1,2] [--epochs N] [--max-batches-per-epoch N]
        [--set [MODEL.]KEY=VALUE ...] [--device auto|cpu|cuda] [--threads N] [--note TEXT]
        [--out runs/bench_accuracy] [--tracking-uri URI] [--budget-s S] [--no-write]

Every run goes through `tinykg_train.trainer.train` (the code of `pipelines.train`) with the model's
shipped settings (`configs/<model>.yaml`), then `--set` overrides (`MODEL.KEY=VALUE` for one model)
and the flags above; MLflow is off unless `--tracking-uri` is given. Runs live in
`--out/<dataset>/<model>/<width>/seed<S>`: a run whose metrics.json exists is read back, not re-run
(its settings must match, else the script stops and says so), and a run that holds only a checkpoint
is resumed, so a sequence of time-limited commands completes the matrix. `--budget-s` stops starting
new runs after that many seconds, then reports what is finished. The report (mean ± std over seeds,
ratios INTb / FP32) goes to one section of BENCHMARKS.md per dataset, `accuracy-<dataset>-<device>`,
which the next run on that dataset and device replaces, whatever models it trains
(`TINYKG_BENCHMARKS_MD` redirects the file; an experiment that should not replace the current
results runs with `--no-write`), and its memory-vs-accuracy plot to benchmarks/figures/<section>.png
(`TINYKG_FIGURES_DIR` redirects them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._accuracy_report import Run, report
from benchmarks._cli import add_device_options, comma_list
from benchmarks._datasets import DatasetUnavailable, resolve_dataset
from benchmarks._report import (
    REPO_ROOT,
    figures_dir_for,
    publish_section,
    section_name,
    width_label,
)
from tinykg_train.config import MODELS

DATASETS = ("lfm1m-kgat", "music-kgcn")
BITS = (32, 8, 4, 2, 1)
CONFIGS = REPO_ROOT / "configs"
# Settings that may differ between a finished run and this invocation without making it stale.
IGNORED_SETTINGS = frozenset({"out", "data", "device", "resume", "eval_batch_users"})
# Settings an uncompressed (FP32) run never reads: its finished runs serve any of their values.
COMPRESSION_SETTINGS = frozenset({"group_size", "scheme", "score_bits", "normalize_bits"})


@dataclass(frozen=True)
class Planned:
    """One run of the matrix."""

    dataset: str
    model: str
    bits: int
    seed: int
    path: Path

    @property
    def label(self) -> str:
        return f"{self.dataset} {self.model} {width(self.bits)} seed {self.seed}"


def width(bits: int) -> str:
    """The run dir's name for a bit width: fp32, int2, ..."""
    return width_label(bits).lower()


def plan(out: Path, datasets, models, bits_list, seeds) -> list[Planned]:
    """Seeds outermost, so an interrupted matrix still has whole seeds to compare."""
    return [
        Planned(d, m, b, s, out / d / m / width(b) / f"seed{s}")
        for d in datasets
        for s in seeds
        for m in models
        for b in bits_list
    ]


def run_config(run: Planned, data: Path, args: argparse.Namespace):
    """The run's TrainConfig: configs/<model>.yaml < `--set KEY=V` < `--epochs`,
    `--max-batches-per-epoch` < `--set MODEL.KEY=V` (e.g. `bprmf.epochs=100`)."""
    from tinykg_train.config import TrainConfig

    overrides: dict[str, Any] = {k: v for k, v in args.set.items() if "." not in k}
    if args.epochs is not None:
        overrides["epochs"] = args.epochs
    if args.max_batches_per_epoch is not None:
        overrides["max_batches_per_epoch"] = args.max_batches_per_epoch
    prefix = f"{run.model}."
    overrides.update({k[len(prefix) :]: v for k, v in args.set.items() if k.startswith(prefix)})
    overrides.update(
        data=str(data), model=run.model, bits=run.bits, seed=run.seed, device=args.device
    )
    overrides["out"] = str(run.path)
    base = CONFIGS / f"{run.model}.yaml"
    if base.is_file():
        return TrainConfig.from_yaml(base, overrides)
    return TrainConfig.from_dict(overrides)


class StaleRun(RuntimeError):
    """A finished run dir was made with other settings than this invocation asks for."""


def finished(run: Planned, config) -> dict | None:
    """The metrics of a finished run with the same settings, None when it has not finished."""
    metrics_path = run.path / "metrics.json"
    if not metrics_path.is_file():
        return None
    metrics = json.loads(metrics_path.read_text())
    saved, wanted = metrics.get("config", {}), config.to_dict()
    ignored = IGNORED_SETTINGS | (COMPRESSION_SETTINGS if config.bits == 32 else frozenset())
    changed = sorted(k for k in wanted if k not in ignored and saved.get(k) != wanted[k])
    if changed:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {wanted[k]!r}" for k in changed)
        raise StaleRun(
            f"{run.path} holds a finished run with other settings ({details}); use another --out"
        )
    return metrics


def execute(run: Planned, config, tracking_uri: str | None) -> dict:
    """Train (or resume) one run through the trainer; returns its metrics."""
    from tinykg_train.trainer import train

    resume = (run.path / "checkpoint.pt").is_file()
    config = config.with_overrides(resume=resume)
    tracker = None
    if tracking_uri:
        from tinykg_train.tracking import MlflowTracker

        tracker = MlflowTracker(
            tracking_uri=tracking_uri,
            experiment="bench_accuracy",
            run_name=f"{run.dataset}-{run.model}-{width(run.bits)}-s{run.seed}",
        )
    return train(config, tracker=tracker)


def parse_setting(text: str) -> tuple[str, Any]:
    """KEY=VALUE with the value read as YAML (`lr=5e-3`, `eval_ks=[20,50]`)."""
    import yaml

    key, sep, value = text.partition("=")
    model, dot, _ = key.partition(".")
    if not sep or not key.strip() or (dot and model not in MODELS):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE or MODEL.KEY=VALUE (got {text!r})")
    return key.strip(), yaml.safe_load(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_accuracy",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--datasets", type=comma_list(str), default=list(DATASETS))
    parser.add_argument("--models", type=comma_list(str, MODELS), default=list(MODELS))
    parser.add_argument("--bits", type=comma_list(int, BITS), default=list(BITS))
    parser.add_argument("--seeds", type=comma_list(int), default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, help="epochs per run (default: the model's config)")
    parser.add_argument("--max-batches-per-epoch", type=int, help="cap the steps per phase")
    parser.add_argument(
        "--set",
        type=parse_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a TrainConfig setting for every run (e.g. lr=0.005) or, as MODEL.KEY=VALUE, for one "
        "model's runs (e.g. bprmf.epochs=100); repeatable",
    )
    add_device_options(parser)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "runs" / "bench_accuracy")
    parser.add_argument("--tracking-uri", help="log every run to this MLflow store (default: off)")
    parser.add_argument(
        "--budget-s", type=float, help="start no new run after this many seconds; then report"
    )
    parser.add_argument(
        "--note", default="", help="a sentence for the section (why these settings)"
    )
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.set = dict(args.set)
    import torch

    from tinykg_train.device import resolve_device
    from tinykg_train.errors import TinyKGError

    if args.threads:
        torch.set_num_threads(args.threads)
    bits_list = [32, *(b for b in args.bits if b != 32)]  # every ratio needs FP32
    start = time.perf_counter()
    try:
        device = resolve_device(args.device)
        data = dict(resolve_dataset(spec) for spec in args.datasets)
        runs = plan(args.out, list(data), args.models, bits_list, args.seeds)
        configs = {run: run_config(run, data[run.dataset], args) for run in runs}
    except (TinyKGError, DatasetUnavailable) as exc:
        print(exc, file=sys.stderr)
        return 2
    results: list[Run] = []
    for index, run in enumerate(runs, 1):
        try:
            metrics = finished(run, configs[run])
        except StaleRun as exc:
            print(exc, file=sys.stderr)
            return 2
        if metrics is None:
            if args.budget_s is not None and time.perf_counter() - start > args.budget_s:
                print(
                    f"budget of {args.budget_s:g} s spent: {run.label} and later runs not started"
                )
                break
            print(f"[{index}/{len(runs)}] {run.label}: training", flush=True)
            run_start = time.perf_counter()
            try:
                metrics = execute(run, configs[run], args.tracking_uri)
            except TinyKGError as exc:  # e.g. a diverged run: report the others
                print(f"[{index}/{len(runs)}] {run.label}: failed: {exc}", flush=True)
                continue
            print(
                f"[{index}/{len(runs)}] {run.label}: recall@20 {metrics['recall@20']:.4f} "
                f"in {time.perf_counter() - run_start:.0f} s",
                flush=True,
            )
        results.append(Run(run.dataset, run.model, run.bits, run.seed, metrics))
    if not results:
        print("no run has finished: nothing to report (BENCHMARKS.md left as it is)")
        return 0
    figures = figures_dir_for(write=not args.no_write)
    for dataset in dict.fromkeys(r.dataset for r in results):  # one section per dataset
        section = section_name("accuracy", device.type, dataset)
        ran = [r for r in results if r.dataset == dataset]
        planned = {run: config for run, config in configs.items() if run.dataset == dataset}
        title, body, table = report(ran, planned, section, device, figures, args.note)
        print(table)
        publish_section(section, title, body, write=not args.no_write)
    missing = len(runs) - len(results)
    if missing:
        print(f"{missing} of {len(runs)} runs not finished: run the same command again to continue")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
