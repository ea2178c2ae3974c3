"""Ingest throughput (MB/s of raw text) and peak memory, on the shared datasets and synthetic ones.

    python -m benchmarks.bench_ingest [--repeats 5] [--sizes 10000,100000,300000] [--kg-triples 10000000]

Each dataset is ingested in a fresh subprocess, so its peak RSS (`resource.getrusage`) belongs to that
ingest alone: the first call (cold: Polars' thread pool and caches start) and then `--repeats` warm
calls into new dirs, of which the median is reported. Throughput is the raw bytes of the files the
reader used divided by the wall time of `kg_data.ingest(...)` (parse, check, dedup, split, hash,
write Parquet). Synthetic KGAT dirs (`kg_data.synthetic`) show how it scales; a dir with a large
`kg_final.txt` shows the memory of a big KG. Writes its section of BENCHMARKS.md and a plot.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._report import (
    FIGURES,
    REPO_ROOT,
    SHARED_DATA,
    figure_name,
    markdown_table,
    section_name,
    write_section,
)

GOAL_MB_S = 50.0
SHARED = ("lfm1m-kgat", "ml-100k-recbole", "music-kgcn")


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM). Not `ru_maxrss`: Linux carries that over from the
    parent across fork + exec, so a child started by a big parent would report the parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_one(raw: Path, repeats: int) -> dict:
    """Run in the child process: ingest `raw` 1 + `repeats` times, report times and peak RSS."""
    from kg_data import ingest

    after_import = peak_rss_mb()
    seconds = []
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        for i in range(1 + repeats):
            start = time.perf_counter()
            info = ingest(raw, Path(tmp) / f"out{i}", progress=False)
            seconds.append(time.perf_counter() - start)
            shutil.rmtree(info.path)
    meta = info.metadata
    return {
        "raw_bytes": sum(s["bytes"] for s in meta["sources"].values()),
        "cold_s": seconds[0],
        "warm_s": statistics.median(seconds[1:]) if repeats else seconds[0],
        "peak_rss_mb": peak_rss_mb(),
        "import_rss_mb": after_import,
        "format": meta["source_format"],
        "interactions": sum(meta["n_interactions"].values()),
        "triples": meta["n_triples"],
    }


def measure(raw: Path, repeats: int) -> dict:
    """`measure_one` in a fresh interpreter, so peak RSS is this dataset's alone."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_ingest", "--measure", str(raw), "--repeats", str(repeats)],
        capture_output=True, text=True, cwd=REPO_ROOT, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"measuring {raw} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def synthetic_dir(root: Path, n_users: int) -> tuple[Path, float]:
    from kg_data.synthetic import write_synthetic_kgat

    start = time.perf_counter()
    raw = write_synthetic_kgat(
        root / f"synthetic-{n_users}",
        n_users=n_users,
        n_items=max(1000, n_users // 2),
        n_extra_entities=n_users,
        n_relations=8,
        mean_user_degree=30,
        seed=0,
    )
    return raw, time.perf_counter() - start


def big_kg_dir(root: Path, n_triples: int) -> Path:
    """A KGAT dir whose weight is a `kg_final.txt` of `n_triples` random triples (a large KG)."""
    import numpy as np
    import polars as pl

    from kg_data.synthetic import write_synthetic_kgat

    raw = write_synthetic_kgat(root / f"big-kg-{n_triples}", n_users=20000, n_items=50000, n_extra_entities=1000, n_relations=4, mean_user_degree=20, seed=0)
    rng = np.random.default_rng(0)
    n_entities = 2_000_000
    pl.DataFrame(
        {"h": rng.integers(0, n_entities, n_triples), "r": rng.integers(0, 32, n_triples), "t": rng.integers(0, n_entities, n_triples)}
    ).write_csv(raw / "kg_final.txt", separator=" ", include_header=False)
    (raw / "entity_list.txt").unlink()
    (raw / "relation_list.txt").unlink()
    return raw


def plot(rows: list[tuple[str, dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    sizes = [r["raw_bytes"] / 1e6 for _, r in rows]
    rates = [r["raw_bytes"] / 1e6 / r["warm_s"] for _, r in rows]
    ax.scatter(sizes, rates)
    for (name, _), x, y in zip(rows, sizes, rates, strict=True):
        ax.annotate(name, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.axhline(GOAL_MB_S, color="grey", linestyle="--", linewidth=1, label=f"goal {GOAL_MB_S:g} MB/s")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("raw text (MB)")
    ax.set_ylabel("ingest throughput, warm (MB/s)")
    ax.set_title("kg_data.ingest on 2 CPU cores")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_ingest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="warm runs per dataset (median reported)")
    parser.add_argument("--sizes", default="10000,100000,300000", help="synthetic KGAT dirs: comma-separated user counts")
    parser.add_argument("--kg-triples", type=int, default=10_000_000, help="triples of the large-KG dir (0: skip it)")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # child-process mode
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure_one(args.measure, args.repeats)))
        return 0

    load_before = os.getloadavg()
    rows: list[tuple[str, dict]] = []
    for name in SHARED:
        if (SHARED_DATA / name).is_dir():
            rows.append((name, measure(SHARED_DATA / name, args.repeats)))
            print(name, rows[-1], flush=True)
        else:
            print(f"skipping {name}: {SHARED_DATA / name} not found", flush=True)
    generation = {}
    with tempfile.TemporaryDirectory(prefix="bench_ingest_raw_") as tmp:
        for n_users in (int(s) for s in args.sizes.split(",") if s):
            raw, seconds = synthetic_dir(Path(tmp), n_users)
            generation[f"synthetic {n_users:,} users"] = seconds
            rows.append((f"synthetic {n_users:,} users", measure(raw, max(1, args.repeats // 2))))
            print(rows[-1], flush=True)
            shutil.rmtree(raw)
        if args.kg_triples:
            raw = big_kg_dir(Path(tmp), args.kg_triples)
            rows.append((f"kg_final {args.kg_triples / 1e6:g}M triples", measure(raw, 1)))
            print(rows[-1], flush=True)

    table = markdown_table(
        ["dataset", "format", "raw MB", "interactions", "triples", "cold s", "warm s", "MB/s warm", "MB/s cold", "warm / goal", "peak RSS MB", "RSS after import MB"],
        [
            [
                name,
                r["format"],
                f"{r['raw_bytes'] / 1e6:.1f}",
                f"{r['interactions']:,}",
                f"{r['triples']:,}",
                f"{r['cold_s']:.3f}",
                f"{r['warm_s']:.3f}",
                f"{r['raw_bytes'] / 1e6 / r['warm_s']:.0f}",
                f"{r['raw_bytes'] / 1e6 / r['cold_s']:.0f}",
                f"{r['raw_bytes'] / 1e6 / r['warm_s'] / GOAL_MB_S:.2f}x",
                f"{r['peak_rss_mb']:.0f}",
                f"{r['import_rss_mb']:.0f}",
            ]
            for name, r in rows
        ],
    )
    generated = "; ".join(f"{name}: {s:.1f} s" for name, s in generation.items())
    section = section_name("ingest", "cpu")
    figure = FIGURES / figure_name(section)
    plot(rows, figure)
    body = (
        f"Goal: >= {GOAL_MB_S:g} MB/s of raw text on 2 cores. MB = 10^6 bytes of the raw files the reader used. "
        "Each dataset runs in a fresh process: `cold` is its first `kg_data.ingest` call (Polars starts "
        f"its thread pool and caches), `warm` the median of the next calls (up to {args.repeats}). "
        "Peak RSS is the child process's maximum resident set (Python, Polars and the data included). "
        f"Load average (1 min) when the run started: {load_before[0]:.2f}, at its end: {os.getloadavg()[0]:.2f} "
        "(other work on the 2 cores slows every figure down).\n\n"
        f"{table}\n\n"
        f"Synthetic KGAT dirs (`kg_data.synthetic.write_synthetic_kgat`, mean degree 30, items = users / 2) "
        f"took to generate: {generated}.\n\n"
        f"![ingest throughput](benchmarks/figures/{figure.name})"
    )
    path = write_section(section, "Ingest throughput (kg_data.ingest)", body)
    print(f"wrote {path} and {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
