"""python -m pipelines.ingest RAW --out DIR: raw KG-recommendation files -> a Parquet dataset dir.

Formats: KGAT, KGCN, RecBole atomic files, plain interaction/triple tables (detected from the file
names; --format forces one). Bad input prints one line naming the file and line and exits with 2.
Files larger than memory ingest too: they are read in blocks and deduplicated and split in buckets
on disk; the summary ends with the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pipelines._cli import prog_name, run_cli


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
    parser.add_argument(
        "--split",
        default="auto",
        metavar="METHOD",
        help="auto (default: keep the data's own splits; else per user by timestamp when every interaction has one, "
        "else random), time (per user, oldest to train, newest to test), random (per user, with --seed)",
    )
    parser.add_argument("--split-ratios", default="0.8,0.1,0.1", metavar="TRAIN,VALID,TEST", help="per-user shares (default 0.8,0.1,0.1)")
    parser.add_argument(
        "--split-rounding",
        default="half-up",
        metavar="ROUNDING",
        help="how a user's valid/test counts are rounded: half-up (default) or down (RecBole's split_by_ratio)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random per-user split (default 0)")
    parser.add_argument(
        "--drop-unlinked-items",
        action="store_true",
        help="drop the interactions of items that occur in no triple, as RecBole's KG datasets do (counted in metadata 'dropped')",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def parse_ratios(text: str) -> tuple[float, ...]:
    """'0.8,0.1,0.1' -> (0.8, 0.1, 0.1); kg_data checks the shares themselves."""
    from kg_data.errors import KGDataError

    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise KGDataError(f"--split-ratios needs three numbers like 0.8,0.1,0.1 (got {text!r})") from None


def peak_rss_bytes() -> int:
    """This process's peak resident memory (VmHWM; `ru_maxrss` where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def stats_table(metadata: dict, seconds: float, peak_bytes: int | None = None) -> str:
    """The end-of-run summary: counts, how the split was made, what was dropped and noticed."""
    split = metadata["split"]
    rows = [
        ("format", metadata["source_format"]),
        ("users", metadata["n_users"]),
        ("items", metadata["n_items"]),
        ("entities", metadata["n_entities"]),
        ("relations", metadata["n_relations"]),
        ("triples", metadata["n_triples"]),
        *((f"interactions {name}", n) for name, n in metadata["n_interactions"].items()),
        ("split", split["method"]),
        *((("split ratios", "/".join(f"{r:g}" for r in split["ratios"].values())), ("split rounding", split["rounding"])) if "ratios" in split else ()),
        *((f"dropped: {reason}", n) for reason, n in metadata["dropped"].items() if n),
        *((f"reported: {kind}", n) for kind, n in metadata["reported"].items() if n),
        ("seconds", f"{seconds:.2f}"),
        *((("peak RSS (MiB)", round(peak_bytes / 2**20)),) if peak_bytes is not None else ()),
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
        split=args.split,
        split_ratios=parse_ratios(args.split_ratios),
        split_rounding=args.split_rounding,
        seed=args.seed,
        drop_unlinked_items=args.drop_unlinked_items,
        progress=not args.no_progress and sys.stderr.isatty(),
    )
    print(f"wrote {info.path}")
    print(stats_table(info.metadata, time.perf_counter() - start, peak_rss_bytes()))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
