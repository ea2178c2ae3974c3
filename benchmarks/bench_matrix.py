"""The accuracy matrix: datasets x models x widths x seeds, trained to convergence, against FP32.

    python -m benchmarks.bench_matrix [--plan benchmarks/matrix.yaml] [--datasets A,B] [--models ...]
        [--widths 32,2,auto] [--seeds 0,1,2] [--modes whole] [--set KEY=VALUE ...] [--threads 1]
        [--out runs/matrix] [--budget-s S] [--no-write]

The plan (benchmarks/matrix.yaml) names the datasets (shared ones are ingested once into data/bench;
`synthetic: {...}` ones are generated there by `kg_data.synthetic`), models, widths, seeds, training
modes and settings; the flags narrow it. Each (dataset, mode, model, seed) is a group: one worker
process per width (`benchmarks._matrix_worker`, the trainer's own epochs), whose epochs take turns,
one at a time, until every width has stopped early on valid Recall@20 (same patience for all). So:
- every epoch-time ratio compares epochs run minutes apart at most, and each width's peak memory
  is its own process's peak RSS (the CUDA allocator's peak on a GPU);
- a finished run (its metrics.json) is read back, not re-run, and a run that holds a checkpoint
  resumes: a sequence of `--budget-s`-limited commands completes the matrix. When FP32 of a group
  has finished but another width has not, a throwaway FP32 training runs beside it, only to time
  epochs in the same rounds.
Width `aa` is the A/A control: the INT2 code path with every quantized save kept exact
(`--exact-phases cf,kg`), whose steps compute FP32's gradients. Its runs differ from FP32's only by
float rounding, which training amplifies within an epoch, so its ratio to FP32 is what the interval
of a width that changes nothing looks like on that cell.
The report (section `accuracy-matrix-<device>` of BENCHMARKS.md, `accuracy-matrix-<dataset>-<device>`
when one dataset is run, and a figure) gives per cell the
test Recall@20 / NDCG@20 mean ± std, the ratio to FP32 with its paired 95% interval over seeds,
whether that interval shows the width within 1% of FP32, activation bytes held, peak memory and the
epoch-time ratio (see benchmarks/_matrix_report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from benchmarks._cli import comma_list
from benchmarks._datasets import BENCH_DATA, DatasetUnavailable, resolve_dataset
from benchmarks._matrix_report import (
    BASE_MODE,
    CONTROL,
    FP32,
    Cell,
    Key,
    mode_table,
    plot,
    popularity_lines,
    results_table,
    same_round_ratios,
    verdict_counts,
    width_label,
)
from benchmarks._report import (
    REPO_ROOT,
    figure_name,
    figures_dir_for,
    markdown_table,
    publish_section,
    section_name,
)

PLAN = REPO_ROOT / "benchmarks" / "matrix.yaml"
CONFIGS = REPO_ROOT / "configs"
# Settings that may differ between a finished run and this invocation without making it stale.
IGNORED_SETTINGS = frozenset({"out", "data", "device", "resume", "eval_batch_users"})


@dataclass(frozen=True)
class Group:
    """The widths of one (dataset, mode, model, seed), trained side by side."""

    dataset: str
    mode: str
    model: str
    seed: int

    def path(self, out: Path) -> Path:
        return out / self.dataset / self.mode / self.model

    def run_dir(self, out: Path, width: str) -> Path:
        return (
            self.path(out)
            / ("fp32" if width == FP32 else f"int{width}" if width.isdigit() else width)
            / f"seed{self.seed}"
        )

    def timing_file(self, out: Path) -> Path:
        return self.path(out) / f"seed{self.seed}-timing.json"

    @property
    def label(self) -> str:
        return f"{self.dataset} {self.mode} {self.model} seed {self.seed}"


# -- the plan ---------------------------------------------------------------------------------------


def read_plan(path: Path) -> dict[str, Any]:
    from tinykg_train.config import read_yaml_mapping

    plan = read_yaml_mapping(path)
    for key in ("datasets", "models", "widths", "seeds", "modes"):
        if not plan.get(key):
            raise SystemExit(f"error: {path}: needs a non-empty '{key}'")
    return plan


def dataset_dir(name: str, spec: dict[str, Any]) -> Path:
    """The ingested dir of a plan dataset: `path: DIR`, a shared one by name, or a synthetic one
    generated (and ingested) on first use."""
    if spec.get("path"):  # a dir written by `pipelines.ingest`
        return resolve_dataset(str(spec["path"]))[1]
    synthetic = spec.get("synthetic")
    if synthetic is None:
        return resolve_dataset(name)[1]
    out = BENCH_DATA / name
    if (out / "metadata.json").is_file():
        return out
    import kg_data
    from kg_data.synthetic import write_synthetic_kgat

    with tempfile.TemporaryDirectory() as tmp:
        print(f"generating {name} ({synthetic})", flush=True)
        raw = write_synthetic_kgat(Path(tmp) / "raw", seed=0, **synthetic)
        kg_data.ingest(raw, out, overwrite=True, progress=False)
    return out


def run_config(group: Group, width: str, data: Path, plan: dict[str, Any], sets: dict, out: Path):
    """configs/<model>.yaml < plan `train` < the dataset's settings < the mode's < --set."""
    from tinykg_train.config import TrainConfig, read_yaml_mapping

    values: dict[str, Any] = {}
    base = CONFIGS / f"{group.model}.yaml"
    if base.is_file():
        values.update(read_yaml_mapping(base))
    values.update(plan.get("train") or {})
    dataset_settings = plan["datasets"][group.dataset] or {}
    values.update({k: v for k, v in dataset_settings.items() if k not in ("synthetic", "path")})
    values.update(plan["modes"][group.mode] or {})
    values.update(sets)
    values.update(
        data=str(data),
        model=group.model,
        bits=int(width) if width.isdigit() else width,
        seed=group.seed,
        out=str(group.run_dir(out, width)),
    )
    if width == CONTROL:
        values.update(bits=2, exact_phases=control_phases(group.model))
    return TrainConfig.from_dict(values, source="matrix plan")


def control_phases(model: str) -> list[str]:
    """Every training phase of `model`: what the A/A control keeps exact."""
    from tinykg_train.models import MODELS

    return ["cf", "kg"] if MODELS[model].has_kg_phase else ["cf"]


def finished_metrics(config) -> dict | None:
    """A finished run's metrics when its settings are this config's; raises SystemExit otherwise."""
    path = Path(config.out) / "metrics.json"
    if not path.is_file():
        return None
    metrics = json.loads(path.read_text())
    saved, wanted = metrics.get("config", {}), config.to_dict()
    defaults = type(config)().to_dict()  # a setting newer than the run: unchanged at its default
    changed = sorted(
        k
        for k in wanted
        if k not in IGNORED_SETTINGS and saved.get(k, defaults.get(k)) != wanted[k]
    )
    if changed:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {wanted[k]!r}" for k in changed)
        raise SystemExit(
            f"error: {config.out} holds a run with other settings ({details}); use another --out"
        )
    return metrics


# -- workers taking turns ---------------------------------------------------------------------------


class Worker:
    """A `benchmarks._matrix_worker` process training one width of a group."""

    def __init__(self, width: str, config, threads: int, scratch: Path) -> None:
        self.width, self.done, self.failed = width, False, None
        config_file = scratch / f"config-{width}.json"
        config_file.write_text(json.dumps(config.to_dict()))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._matrix_worker", str(config_file), str(threads)],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": str(threads)},
        )

    def _receive(self) -> dict[str, Any] | None:
        while True:
            line = self.process.stdout.readline()
            if not line:
                self.process.wait()
                self.done, self.failed = True, f"exit {self.process.returncode} (see stderr above)"
                return None
            if line.startswith("{"):
                return json.loads(line)

    def _send(self, command: str) -> dict[str, Any] | None:
        try:
            self.process.stdin.write(json.dumps({"cmd": command}) + "\n")
            self.process.stdin.flush()
        except OSError:
            pass
        return self._receive()

    def wait_ready(self) -> None:
        message = self._receive()
        if message is not None:
            self.done = bool(message["done"])

    def epoch(self) -> float | None:
        message = self._send("epoch")
        if message is None:
            return None
        self.done = bool(message["done"])
        return float(message["epoch_seconds"])

    def finish(self) -> None:
        if self.failed is None:
            self._send("finish")
        self.close()

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


def read_rounds(path: Path) -> list[dict[str, float]]:
    return json.loads(path.read_text()) if path.is_file() else []


def usable_configs(group: Group, widths, data: Path, plan, sets, out: Path) -> dict[str, Any]:
    """Each width's config of a group; a width the group's mode refuses (e.g. `auto` with a sampled
    mode) is left out with a note, not the whole matrix. FP32's refusal is the plan's error."""
    from tinykg_train.errors import ConfigError

    configs = {}
    for width in widths:
        try:
            configs[width] = run_config(group, width, data, plan, sets, out)
        except ConfigError as exc:
            if width == FP32:
                raise
            print(f"skipped: {group.label} {width_label(width)}: {exc}", file=sys.stderr)
    return configs


def train_group(group: Group, configs: dict[str, Any], out: Path, threads: int) -> list[str]:
    """Train the unfinished widths of a group, epochs taking turns; returns the widths that failed."""
    pending = {w: c for w, c in configs.items() if finished_metrics(c) is None}
    if not pending:
        return []
    timing = group.timing_file(out)
    rounds = read_rounds(timing)
    with tempfile.TemporaryDirectory(prefix="matrix-") as tmp:
        scratch = Path(tmp)
        workers = {w: Worker(w, c, threads, scratch) for w, c in pending.items()}
        shadow = None
        if FP32 not in pending and FP32 in configs:  # time FP32 epochs beside the others anyway
            shadow_config = configs[FP32].with_overrides(out=str(scratch / "fp32-shadow"))
            shadow = Worker(FP32, shadow_config, threads, scratch)
        arms = [*workers.values(), *([shadow] if shadow else [])]
        try:
            for worker in arms:
                worker.wait_ready()
            turn = 0
            with tqdm(desc=group.label, unit="round", disable=None, leave=False) as progress:
                while any(not w.done for w in workers.values()):
                    timed: dict[str, float] = {}
                    order = arms if turn % 2 == 0 else arms[::-1]
                    for worker in order:
                        if not worker.done:
                            seconds = worker.epoch()
                            if seconds is not None:
                                timed[worker.width] = seconds
                    rounds.append(timed)
                    timing.parent.mkdir(parents=True, exist_ok=True)
                    timing.write_text(json.dumps(rounds))
                    turn += 1
                    progress.update()
            for worker in workers.values():
                worker.finish()
        finally:
            for worker in arms:
                worker.close()
    return [f"{width_label(w)}: {worker.failed}" for w, worker in workers.items() if worker.failed]


# -- report -----------------------------------------------------------------------------------------


def collect(groups: Sequence[Group], widths: Sequence[str], out: Path) -> dict[Key, Cell]:
    cells: dict[Key, Cell] = {}
    for group in groups:
        rounds = read_rounds(group.timing_file(out))
        for width in widths:
            path = group.run_dir(out, width) / "metrics.json"
            if not path.is_file():
                continue
            key = Key(group.dataset, group.mode, group.model, width)
            cell = cells.setdefault(key, Cell())
            cell.runs[group.seed] = json.loads(path.read_text())
            if width != FP32:
                cell.round_ratios += same_round_ratios(rounds, width)
    return cells


CONTROL_NOTE = (
    " *A/A*: the control, the INT2 code path with every quantized save kept exact (`--bits 2 "
    "--exact-phases cf,kg`): its steps compute FP32's gradients, and its runs differ from FP32's "
    "only by float rounding, which training amplifies within an epoch; its ratio is what a width "
    "that changes nothing reads on that cell."
)


def settings_rows(configs: dict[tuple[str, str], Any]) -> str:
    columns = (
        "epochs", "patience", "min_epochs", "lr", "l2", "batch_size", "embed_dim", "n_layers",
        "dropout",
    )  # fmt: skip
    rows = [
        [dataset, model, *(config.to_dict()[c] for c in columns)]
        for (dataset, model), config in sorted(configs.items())
    ]
    return markdown_table(["dataset", "model", *columns], rows)


def report(
    cells: dict[Key, Cell], settings: dict, device_label: str, threads: int, figure: Path | None
) -> str:
    lines = []
    for width, tally in sorted(verdict_counts(cells).items(), key=lambda kv: kv[0]):
        summary = ", ".join(f"{n} {verdict}" for verdict, n in sorted(tally.items()))
        lines.append(
            f"- {width_label(width)} within 1% of FP32 Recall@20 by its paired interval: {summary}"
        )
    parts = [
        "Each run: the trainer's own epochs (`tinykg_train.trainer.run_epoch`) with the settings "
        "below; early stopping on valid Recall@20 with the same patience for every width; test "
        "metrics of the best valid epoch (full ranking, training and valid items masked). "
        "*Recall / FP32*: ratio of the means over seeds, with the 95% Student-t interval of the "
        "same-seed differences (same initial weights, batches and negatives) divided by FP32's "
        "mean; *within 1%*: yes when the interval lies at or above 0.99, no when below it, unclear "
        "when it straddles it (the seeds cannot tell). *held MiB*: bytes autograd holds for "
        "backward in one CF step. *peak RSS*: the worker process's (one run per process). *epoch "
        "/ FP32*: median over the rounds in which both ran an epoch one after the other (the "
        f"number of rounds in brackets), {threads} torch thread(s) per worker, {device_label}."
        + (CONTROL_NOTE if any(key.width == CONTROL for key in cells) else ""),
        settings_rows(settings),
        results_table(cells),
        "\n".join([*lines, *popularity_lines(cells)]),
    ]
    against_whole = mode_table(cells)
    if against_whole:
        parts += [
            f"Against whole-graph training (mode `{BASE_MODE}`), width for width: the same "
            "paired ratio, each mode's run against the whole-graph run of the same seed, model "
            "and width.",
            against_whole,
        ]
    if figure is not None:
        parts.append(
            f"![Recall@20 / FP32 against memory held, per dataset](benchmarks/figures/{figure.name})"
        )
    return "\n\n".join(p for p in parts if p)


# -- command line -----------------------------------------------------------------------------------


def parse_setting(text: str) -> tuple[str, Any]:
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (got {text!r})")
    return key.strip(), yaml.safe_load(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_matrix",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--plan", type=Path, default=PLAN, help="the matrix (default benchmarks/matrix.yaml)"
    )
    parser.add_argument("--datasets", type=comma_list(str), help="a subset of the plan's datasets")
    parser.add_argument("--models", type=comma_list(str), help="a subset of the plan's models")
    parser.add_argument(
        "--widths", type=comma_list(str), help="bit widths, e.g. 32,2,auto (FP32 is always added)"
    )
    parser.add_argument("--seeds", type=comma_list(int), help="seeds (default: the plan's)")
    parser.add_argument(
        "--modes", type=comma_list(str), help="a subset of the plan's training modes"
    )
    parser.add_argument("--set", type=parse_setting, action="append", default=[], metavar="KEY=VALUE",
                        help="a training setting for every run (after the plan's); repeatable")  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per worker (default 1)"
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "runs" / "matrix")
    parser.add_argument("--budget-s", type=float, help="start no new group after this many seconds")
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    return parser


def choose(plan: dict[str, Any], key: str, wanted: list | None) -> list:
    available = list(plan[key])
    if wanted is None:
        return available
    unknown = [w for w in wanted if w not in available]
    if unknown:
        raise SystemExit(
            f"error: --{key} {', '.join(map(str, unknown))} not in the plan ({', '.join(map(str, available))})"
        )
    return wanted


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = read_plan(args.plan)
    datasets = choose(plan, "datasets", args.datasets)
    models, modes = choose(plan, "models", args.models), choose(plan, "modes", args.modes)
    seeds = args.seeds or [int(s) for s in plan["seeds"]]
    widths = [str(w) for w in (args.widths or plan["widths"])]
    widths = [FP32, *(w for w in widths if w != FP32)]
    sets = dict(args.set)
    from tinykg_train.errors import TinyKGError

    try:
        data = {name: dataset_dir(name, plan["datasets"][name] or {}) for name in datasets}
        groups = [
            Group(d, mode, m, s) for s in seeds for d in datasets for mode in modes for m in models
        ]
        configs = {
            g: usable_configs(g, widths, data[g.dataset], plan, sets, args.out) for g in groups
        }
    except (TinyKGError, DatasetUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start, failures = time.perf_counter(), []
    for index, group in enumerate(groups, 1):
        if args.budget_s is not None and time.perf_counter() - start > args.budget_s:
            print(
                f"budget of {args.budget_s:g} s spent: {len(groups) - index + 1} groups not started"
            )
            break
        print(f"[{index}/{len(groups)}] {group.label}", flush=True)
        failures += [
            f"{group.label} {f}" for f in train_group(group, configs[group], args.out, args.threads)
        ]
    cells = collect(groups, widths, args.out)
    if not cells:
        print("no run has finished: nothing to report")
        return 0
    device = next(iter(next(iter(configs.values())).values())).device
    device_label = "CPU" if device in ("cpu", "auto") else device
    figures = figures_dir_for(write=not args.no_write)
    # one dataset: its own section (a focused re-run leaves the other datasets' results alone)
    only = datasets[0] if len(datasets) == 1 else None
    section = section_name("accuracy-matrix", "cpu" if device_label == "CPU" else "cuda", only)
    figure = plot(cells, figures / figure_name(section)) if figures is not None else None
    settings = {(g.dataset, g.model): configs[g][FP32] for g in groups}
    body = report(cells, settings, device_label, args.threads, figure)
    print(results_table(cells))
    title = f"Accuracy matrix: {only or 'every dataset'}, models and widths against FP32 ({device_label})"
    publish_section(section, title, body, write=not args.no_write)
    for failure in failures:
        print(f"failed: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
