"""python -m pipelines.demo [--out DIR]: TinyKG end to end in a few minutes, with no download.

Writes a synthetic raw KGAT dataset (users and items with tastes, a KG whose tails carry them),
ingests it with the code behind `pipelines.ingest`, trains KGAT uncompressed (FP32) and with INT2
activations through the code behind `pipelines.train`, logs both runs to MLflow and prints a
comparison table: activation memory, compression ratio, Recall@20, NDCG@20, seconds per epoch, and
the most-popular ranking's Recall@20 and NDCG@20 on the same test users (the bar to clear).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipelines._cli import prog_name, run_cli

DEMO_MARKER = ".tinykg-demo"  # a dir holding it was written by this demo and may be overwritten


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog_name("demo"),
        description=(
            "Synthetic data -> ingest -> KGAT at FP32 and at INT2 -> MLflow, then a table comparing "
            "activation memory and accuracy. Needs no download; about a minute on 2 CPU cores."
        ),
    )
    parser.add_argument(
        "--out",
        default="runs/demo",
        metavar="DIR",
        help="where raw data, dataset and runs go (default runs/demo)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier demo in --out")
    parser.add_argument(
        "--users",
        type=int,
        default=2000,
        metavar="N",
        help="synthetic users (default 2000; items = users, extra entities = 2 x users)",
    )
    parser.add_argument(
        "--epochs", type=int, default=10, metavar="N", help="training epochs per run (default 10)"
    )
    parser.add_argument(
        "--bits",
        default="32,2",
        metavar="B,B",
        help="bit widths to compare (default 32,2; 32 = uncompressed)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of data, weights and noise (default 0)"
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="default auto: the GPU when torch sees one",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch CPU threads (default: the CPUs this process may use, as pipelines.train)",
    )
    parser.add_argument(
        "--max-batches-per-epoch", type=int, default=None, metavar="N", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--tracking-uri",
        metavar="URI",
        help="MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the cwd)",
    )
    parser.add_argument(
        "--experiment",
        default="tinykg-demo",
        metavar="NAME",
        help="MLflow experiment (default tinykg-demo)",
    )
    return parser  # fmt: skip


def parse_bits(text: str) -> list[int]:
    from tinykg_train.compression_defaults import BITS
    from tinykg_train.errors import ConfigError

    problem = ConfigError(f"--bits needs a comma list of {', '.join(map(str, BITS))} (got {text!r})")
    try:
        bits = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise problem from None
    if not bits or any(b not in BITS for b in bits):
        raise problem
    return bits


def prepare_out(out: Path, overwrite: bool) -> None:
    """Refuse to write into a non-empty dir unless it is an earlier demo and --overwrite is given."""
    from tinykg_train.errors import ConfigError

    if out.exists() and any(out.iterdir()):
        if not (out / DEMO_MARKER).exists():
            raise ConfigError(
                f"{out}: exists and was not written by the demo; choose another --out"
            )
        if not overwrite:
            raise ConfigError(
                f"{out}: holds an earlier demo; pass --overwrite or choose another --out"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARKER).touch()


def make_dataset(out: Path, users: int, seed: int) -> Path:
    """Synthetic raw KGAT files -> a dataset dir, through `kg_data.ingest` (as pipelines.ingest)."""
    from kg_data import ingest
    from kg_data.synthetic import write_synthetic_kgat
    from pipelines.ingest import stats_table

    start = time.perf_counter()
    raw = write_synthetic_kgat(
        out / "raw",
        n_users=users,
        n_items=users,
        n_extra_entities=2 * users,
        n_relations=6,
        mean_user_degree=25,
        seed=seed,
    )
    info = ingest(raw, out / "dataset", progress=False, seed=seed)
    print(f"synthetic dataset: {info.path}")
    print(stats_table(info.metadata, time.perf_counter() - start))
    return info.path


def train_runs(args: argparse.Namespace, data: Path, out: Path, bits: list[int]) -> list[dict]:
    """KGAT once per bit width, same seed, each logged to MLflow."""
    from tinykg_train.compression_defaults import width_label
    from tinykg_train.config import TrainConfig
    from tinykg_train.tracking import MlflowTracker
    from tinykg_train.trainer import train

    results = []
    for b in bits:
        config = TrainConfig(
            data=str(data),
            model="kgat",
            bits=b,
            epochs=args.epochs,
            seed=args.seed,
            device=args.device,
            out=str(out / "runs" / f"kgat-{width_label(b)}"),
            max_batches_per_epoch=args.max_batches_per_epoch,
            threads=args.threads,
            patience=args.epochs,
        )
        tracker = MlflowTracker(
            tracking_uri=args.tracking_uri, experiment=args.experiment, tags={"demo": "true"}
        )
        print(f"\ntraining KGAT {'FP32' if b == 32 else f'INT{b}'} for {args.epochs} epochs ...")
        result = train(config, tracker=tracker)
        result["mlflow_run_id"] = tracker.run_id
        result["tracking_uri"] = tracker.tracking_uri
        results.append(result)
    return results


def comparison_table(results: list[dict[str, Any]]) -> str:
    """bits | activation MB | compression | Recall@20 | NDCG@20 | s/epoch, relative to the widest
    run; then the most-popular ranking of the same test users (no model: the bar to clear)."""
    reference = max(results, key=lambda r: r["bits"])
    header = ["bits", "activation MB", "compression", "Recall@20", "NDCG@20", "s/epoch"]
    rows = []
    for r in results:
        seconds = r["epoch_seconds"]
        rows.append(
            [
                "FP32" if r["bits"] == 32 else f"INT{r['bits']}",
                f"{r['activation_bytes'] / 1e6:.2f}",
                f"{reference['activation_bytes'] / r['activation_bytes']:.1f}x",
                f"{r['recall@20']:.4f}",
                f"{r['ndcg@20']:.4f}",
                f"{sum(seconds) / len(seconds):.2f}",
            ]
        )
    popular = reference.get("most_popular")
    if popular:
        scores = [f"{popular['recall@20']:.4f}", f"{popular['ndcg@20']:.4f}"]
        rows.append(["most popular", "-", "-", *scores, "-"])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines = [" | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from tinykg_train.errors import ConfigError
    from tinykg_train.threads import apply_threads

    bits = parse_bits(args.bits)
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads needs to be a positive integer (got {args.threads})")
    if args.users < 50:
        raise ConfigError(f"--users needs to be at least 50 (got {args.users})")
    if args.epochs < 1:
        raise ConfigError(f"--epochs needs to be a positive integer (got {args.epochs})")
    out = Path(args.out)
    prepare_out(out, args.overwrite)
    print(f"torch threads: {apply_threads(args.threads)}")  # also for the data steps
    data = make_dataset(out, args.users, args.seed)
    results = train_runs(args, data, out, bits)
    print("\nKGAT on the synthetic dataset (test split, best valid epoch):")
    print(comparison_table(results))
    uri = results[0]["tracking_uri"]
    print(
        f"\nMLflow runs: {', '.join(r['mlflow_run_id'] for r in results)} in experiment {args.experiment!r}"
    )
    print("Compare them in the MLflow UI:")
    print(f"  mlflow ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000")
    print("  then open http://127.0.0.1:5000")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
