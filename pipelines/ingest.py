"""python -m pipelines.ingest RAW --out DIR: raw KG-recommendation files -> a Parquet dataset dir.

Formats: KGAT, KGCN, RecBole atomic files, plain interaction/triple tables (detected from the file
names; --format forces one). Bad input prints one line naming the file and line and exits with 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from pipelines._cli import prog_name, run_cli


def _ratios(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected three numbers like 0.8,0.1,0.1 (got {text!r})") from None


def build_parser() -> argparse.ArgumentParser:
    from kg_data.formats import FORMATS

    parser = argparse.ArgumentParser(
        prog=prog_name("ingest"),
        description="Ingest raw KG-recommendation data (KGAT, KGCN, RecBole atomic, plain tables) into a validated Parquet dataset dir.",
    )
    parser.add_argument("raw", metavar="RAW", help="folder that holds the raw files")
    parser.add_argument("--out", required=True, metavar="DIR", help="dataset dir to write (must not exist unless --overwrite)")
    parser.add_argument("--format", default="auto", choices=("auto", *FORMATS), help="raw format (default: detect from the file names)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dataset dir")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random per-user split, for data without splits (default 0)")
    parser.add_argument(
        "--split",
        type=_ratios,
        default=(0.8, 0.1, 0.1),
        metavar="TRAIN,VALID,TEST",
        help="per-user split shares for data without splits (default 0.8,0.1,0.1; by timestamp when the data has one)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def stats_table(metadata: dict, seconds: float) -> str:
    """The end-of-run summary: counts, what was dropped and what was noticed."""
    rows = [
        ("format", metadata["source_format"]),
        ("users", metadata["n_users"]),
        ("items", metadata["n_items"]),
        ("entities", metadata["n_entities"]),
        ("relations", metadata["n_relations"]),
        ("triples", metadata["n_triples"]),
        *((f"interactions {split}", n) for split, n in metadata["n_interactions"].items()),
        ("split", metadata["split"]["method"]),
        *((f"dropped: {reason}", n) for reason, n in metadata["dropped"].items() if n),
        *((f"reported: {kind}", n) for kind, n in metadata["reported"].items() if n),
        ("seconds", f"{seconds:.2f}"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value:>12,}" if isinstance(value, int) else f"{name:<{width}}  {value:>12}" for name, value in rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from kg_data import ingest

    start = time.perf_counter()
    info = ingest(
        args.raw,
        args.out,
        format=args.format,
        overwrite=args.overwrite,
        seed=args.seed,
        split=args.split,
        progress=not args.no_progress and sys.stderr.isatty(),
    )
    print(f"wrote {info.path}")
    print(stats_table(info.metadata, time.perf_counter() - start))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
