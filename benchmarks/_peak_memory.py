"""`bench_memory --peak`: the whole training process's peak memory per model and bit width, and where
it goes, each cell trained in a fresh subprocess.

A cell is the trainer's own code on one epoch of `--steps` CF (and KG) steps and the valid
evaluation (`open_session`, `train_epoch`, `evaluate_epoch`; the final test ranking would repeat
the evaluation's memory), with the
default `TrainConfig` sizes. Its subprocess reports the run's `memory_breakdown` (what the trainer
writes to metrics.json), its peak resident set size (`getrusage`, so a fresh process per cell), the
resident set's peak in each stage (a sampling thread: `open` = dataset, model and batches; `train`;
`evaluate`) and, on CUDA, `max_memory_allocated`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks._report import REPO_ROOT, mib

STAGES = ("open", "train", "evaluate")
PACKAGES = ("kg_data", "tinykg_kernels", "tinykg_train")


@dataclass
class Cell:
    """What one (model, bits) subprocess measured."""

    model: str
    bits: int
    peak_rss_bytes: int
    stage_rss_bytes: dict[str, int]
    breakdown: dict
    activation_bytes: int | None
    cuda_max_memory_allocated: int | None = None
    seconds: float = 0.0
    settings: dict = field(default_factory=dict)

    def tracked_peak(self) -> int | None:
        """The largest measured peak of the breakdown (a training phase or the evaluation)."""
        peaks = [row["peak"] for row in self.breakdown.values() if isinstance(row, dict)]
        return max(peaks) if peaks else None


class StageSampler:
    """Samples this process's resident set every few milliseconds; the peak per named stage."""

    def __init__(self, interval: float = 0.002) -> None:
        import psutil

        self._process, self._interval = psutil.Process(), interval
        self.stage, self.peaks = STAGES[0], {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        rss = self._process.memory_info().rss
        self.peaks[self.stage] = max(self.peaks.get(self.stage, 0), rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(self._interval)

    def enter(self, stage: str) -> None:
        self._sample()
        self.stage = stage
        self._sample()

    def close(self) -> dict[str, int]:
        self._sample()
        self._stop.set()
        self._thread.join()
        return dict(self.peaks)


def run_worker(args: argparse.Namespace) -> dict:
    """One cell, in this process (see the module docstring); returns what `Cell` holds."""
    sampler = StageSampler()
    import torch

    from tinykg_train.config import TrainConfig
    from tinykg_train.device import describe_device, resolve_device
    from tinykg_train.epoch import evaluate_epoch, train_epoch
    from tinykg_train.memory import cuda_peak_bytes, peak_rss_bytes, reset_cuda_peak
    from tinykg_train.session import open_session

    start = time.perf_counter()
    config = TrainConfig(
        data=args.data, model=args.model, bits=args.bits, epochs=1, out=args.out,
        max_batches_per_epoch=args.steps, device=args.device, seed=0,
    )  # fmt: skip
    device = resolve_device(config.device)
    reset_cuda_peak(device)
    session = open_session(config, device)
    if args.eval_block_bytes:
        session.evaluator.block_bytes = args.eval_block_bytes
    session.run.create()
    sampler.enter("train")
    row = train_epoch(session, 0)
    sampler.enter("evaluate")
    evaluate_epoch(session, 0, row)
    stages = sampler.close()
    breakdown = getattr(session.state, "memory_breakdown", {})  # a `--source` older than it: none
    cuda_peak = cuda_peak_bytes(device)
    earlier = [r.get("cuda_peak_before_bytes", 0) for r in breakdown.values() if isinstance(r, dict)]
    return asdict(
        Cell(
            model=args.model,
            bits=args.bits,
            peak_rss_bytes=peak_rss_bytes(),
            stage_rss_bytes=stages,
            breakdown=breakdown,
            activation_bytes=row["activation_bytes"],
            cuda_max_memory_allocated=None if cuda_peak is None else max([cuda_peak, *earlier]),
            seconds=time.perf_counter() - start,
            settings={
                "steps": args.steps,
                "eval_block_bytes": getattr(session.evaluator, "block_bytes", None),
                "device": describe_device(device),
                "allocator": os.environ.get("TINYKG_CPU_ALLOCATOR", "tuned"),
                "threads": torch.get_num_threads(),
            },
        )
    )


def measure_cell(
    data: Path,
    model: str,
    bits: int,
    steps: int,
    device: str,
    eval_block_bytes: int | None,
    source: Path | None = None,
) -> Cell:
    """Run one cell in a fresh `python -m benchmarks._peak_memory` subprocess; `source`: another
    checkout whose packages it trains with (this one's benchmarks still run it)."""
    with tempfile.TemporaryDirectory(prefix="bench_peak_") as tmp:
        out = Path(tmp) / "cell.json"
        command = [
            sys.executable, "-m", "benchmarks._peak_memory", "--data", str(data),
            "--model", model, "--bits", str(bits), "--steps", str(steps), "--device", device,
            "--out", str(Path(tmp) / "run"), "--result", str(out),
        ]  # fmt: skip
        if eval_block_bytes:
            command += ["--eval-block-bytes", str(eval_block_bytes)]
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"}
        if source is not None:
            packages = [source / "packages" / p / "src" for p in PACKAGES]
            env["PYTHONPATH"] = os.pathsep.join([*map(str, packages), str(REPO_ROOT)])
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"cell {model} {bits} failed:\n{done.stderr[-3000:]}")
        return Cell(**json.loads(out.read_text()))


# -- datasets ---------------------------------------------------------------------------------------


def synthetic_dataset(n_users: int, root: Path) -> Path:
    """An ingested synthetic KG (`kg_data.synthetic`): `n_users` users and items, 3x as many other
    entities, 8 relations, 30 interactions per user; made once under `root`."""
    import kg_data
    from kg_data.synthetic import write_synthetic_kgat

    out = root / f"synthetic-kgat-{n_users}"
    if (out / "metadata.json").is_file():
        return out
    with tempfile.TemporaryDirectory(prefix="synthetic_raw_") as tmp:
        print(f"generating {out.name}", flush=True)
        raw = write_synthetic_kgat(
            Path(tmp), n_users=n_users, n_items=n_users, n_extra_entities=3 * n_users,
            n_relations=8, mean_user_degree=30, seed=0,
        )  # fmt: skip
        kg_data.ingest(raw, out, overwrite=True, progress=False)
    return out


def dataset_shape(data: Path) -> str:
    meta = json.loads((data / "metadata.json").read_text())
    interactions = sum(meta["n_interactions"].values())
    return (
        f"{meta['n_users']:,} users, {meta['n_items']:,} items, {meta['n_entities']:,} entities, "
        f"{meta['n_triples']:,} triples, {interactions:,} interactions "
        f"({(meta['n_triples'] + interactions) / 1e6:.2f}M triples + interactions)"
    )


# -- report -----------------------------------------------------------------------------------------


def step_parts(row: dict) -> str:
    """`tables / other / buffers / Adam / grads / act / temp` of a phase, MiB."""
    names = ("embedding_tables", "other_parameters", "graph_buffers", "optimizer_state",
             "gradients", "activations", "temporaries")  # fmt: skip
    return " / ".join(mib(row.get(n, 0), 0) for n in names)


def eval_parts(row: dict) -> str:
    parts = ("propagation", "scoring_cache", "score_blocks")
    return " / ".join(mib(row.get(n, 0), 0) for n in parts)


def cell_rows(cells: list[Cell], before: dict[tuple[str, int], Cell]) -> list[list[object]]:
    rows = []
    for cell in cells:
        old = before.get((cell.model, cell.bits))
        stages = " / ".join(mib(cell.stage_rss_bytes.get(s), 0) for s in STAGES)
        rss = mib(cell.peak_rss_bytes, 0) + (f" (was {mib(old.peak_rss_bytes, 0)})" if old else "")
        tracked = mib(cell.tracked_peak(), 0) + (
            f" (was {mib(old.tracked_peak(), 0)})" if old and old.tracked_peak() else ""
        )
        rows.append([
            cell.model, width(cell.bits), rss, stages, tracked,
            step_parts(cell.breakdown.get("cf", {})), eval_parts(cell.breakdown.get("evaluation", {})),
        ])  # fmt: skip
    return rows


def width(bits: int) -> str:
    return "FP32" if bits == 32 else f"INT{bits}"


def ratio_lines(cells: list[Cell], key, what: str) -> list[str]:
    """Per model: FP32's figure over each narrower width's (where both were measured)."""
    by_model: dict[str, dict[int, Cell]] = {}
    for cell in cells:
        by_model.setdefault(cell.model, {})[cell.bits] = cell
    lines = []
    for model, row in by_model.items():
        if 32 not in row or not key(row[32]):
            continue
        ratios = ", ".join(
            f"FP32 / {width(b)} **{key(row[32]) / key(c):.2f}x**"
            for b, c in row.items()
            if b != 32 and key(c)
        )
        if ratios:
            lines.append(f"- {model}, {what}: {ratios}")
    return lines


def report(cells: list[Cell], dataset: str, shape: str, before: dict, device: str) -> str:
    from benchmarks._report import markdown_table

    steps = cells[0].settings.get("steps") if cells else "?"
    parts = [
        f"Data: **{dataset}** ({shape}). Each cell is a fresh process running the trainer's own code "
        f"(`open_session`, one epoch of {steps} CF steps and, for KGAT, {steps} KG steps, the valid "
        "evaluation) with the default `TrainConfig` sizes (batch "
        "2048, embedding 64, 3 layers). *Peak RSS* is the process's resident set high-water mark "
        "(`getrusage`), then its peak per stage (`open`: dataset, model, batches; `train`; `evaluate`: "
        "valid). *Tracked* is the largest peak of the run's `memory_breakdown` (torch's "
        "tensors only; metrics.json). The CF step's parts: embedding tables / other parameters / "
        "graph buffers / Adam state / gradients / activations held for backward / temporaries; the "
        "evaluation's: propagation / scoring cache / score blocks. MiB = 2^20 bytes.",
        markdown_table(
            [
                "model",
                "width",
                "peak RSS MiB",
                "RSS by stage MiB",
                "tracked MiB",
                "CF step parts MiB",
                "eval parts MiB",
            ],
            cell_rows(cells, before),
        ),  # fmt: skip
        "\n".join(
            ratio_lines(cells, lambda c: c.peak_rss_bytes, "peak RSS")
            + ratio_lines(cells, Cell.tracked_peak, "tracked peak")
        ),
    ]
    if before:
        parts.append("*was*: the same cells measured before the cuts (`--compare`).")
    if device == "cuda":
        parts.append(
            "CUDA `max_memory_allocated` MiB: "
            + ", ".join(
                f"{c.model} {width(c.bits)} {mib(c.cuda_max_memory_allocated, 0)}" for c in cells
            )
        )
    return "\n\n".join(p for p in parts if p)


def save_cells(path: Path, cells: list[Cell]) -> None:
    path.write_text(json.dumps([asdict(c) for c in cells], indent=1))


def load_cells(path: Path) -> dict[tuple[str, int], Cell]:
    return {(c["model"], c["bits"]): Cell(**c) for c in json.loads(path.read_text())}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._peak_memory", description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--bits", type=int, required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", required=True, help="run dir")
    parser.add_argument("--result", required=True, help="JSON file the cell is written to")
    parser.add_argument("--eval-block-bytes", type=int, default=None)
    args = parser.parse_args(argv)
    Path(args.result).write_text(json.dumps(run_worker(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
