"""Sampling throughput on the lfm1m collaborative KG: ours vs PyG's NeighborLoader, plus negatives.

Run in the PyG comparison env (built by benchmarks/pyg_env.sh) to get both sides:

    benchmarks/.venv-pyg/bin/python -m benchmarks.bench_sampling

In an env without torch-sparse/pyg-lib it says so and records our figures only. Every figure comes
from this one run, on the same seed batches; ratios compare numbers measured side by side.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from benchmarks._report import (
    FIGURES,
    SHARED_DATA,
    figure_name,
    markdown_table,
    publish_section,
    section_name,
)


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `fn()` over `repeats` runs, after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def seed_batches(num_nodes: int, batch_size: int, seed: int) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(num_nodes)
    return [order[i : i + batch_size] for i in range(0, num_nodes, batch_size)]


def ours(ckg, batches: list[np.ndarray], fanouts: list[int], replace: bool) -> Callable[[], object]:
    from kg_data import NeighborSampler

    sampler = NeighborSampler(ckg, fanouts, replace=replace, seed=0)
    return lambda: [sampler.sample(b).to_torch() for b in batches]


def pyg_available() -> str | None:
    """None when PyG's neighbor sampler can run here, else the reason it cannot."""
    try:
        import torch_geometric.typing as pyg_typing
    except ImportError as exc:
        return f"torch_geometric not importable ({exc})"
    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        return (
            "neither pyg-lib nor torch-sparse is installed (build them with benchmarks/pyg_env.sh)"
        )
    return None


def pyg_runs(
    ckg, batches: list[np.ndarray], fanouts: list[int], replace: bool
) -> tuple[Callable[[], object], Callable[[], object]]:
    """(full NeighborLoader epoch, raw C++ sampling op only) over the same seed batches."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.sampler import NeighborSampler as PygSampler
    from torch_geometric.sampler import NodeSamplerInput

    heads, tails, _ = ckg.coo()
    # PyG samples, for each seed, the sources of the edges pointing at it: edge t -> h.
    data = Data(edge_index=torch.from_numpy(np.stack([tails, heads])), num_nodes=ckg.num_nodes)
    order = torch.from_numpy(np.concatenate(batches))
    loader = NeighborLoader(
        data,
        num_neighbors=fanouts,
        batch_size=len(batches[0]),
        input_nodes=order,
        shuffle=False,
        replace=replace,
    )
    sampler = PygSampler(data, num_neighbors=fanouts, replace=replace)
    inputs = [NodeSamplerInput(input_id=None, node=torch.from_numpy(b)) for b in batches]
    return (lambda: list(loader)), (lambda: [sampler.sample_from_nodes(i) for i in inputs])


def rejection_negatives(
    keys: np.ndarray, users: np.ndarray, n_items: int, rng: np.random.Generator
) -> np.ndarray:
    """Baseline: draw uniform items, look them up among the sorted positive keys, redraw the hits."""
    items = rng.integers(0, n_items, len(users))
    todo = np.arange(len(users))
    while len(todo):
        candidate = users[todo] * n_items + items[todo]
        hit = keys[np.minimum(np.searchsorted(keys, candidate), len(keys) - 1)] == candidate
        todo = todo[hit]
        items[todo] = rng.integers(0, n_items, len(todo))
    return items


def csr_numpy(
    src: np.ndarray, dst: np.ndarray, rel: np.ndarray, num_rows: int
) -> tuple[np.ndarray, ...]:
    """The alternative CSR build: one packed int64 key, np.unique (sort + dedup), bincount."""
    n = num_rows
    r = int(rel.max()) + 1
    keys = np.unique((src * r + rel) * n + dst)
    rows = keys // (r * n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, keys % n, (keys // n) % r


def plot(rows: list[tuple[str, float]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    short = {
        "kg_data NeighborSampler": "kg_data",
        "PyG NeighborLoader": "PyG loader",
        "PyG NeighborSampler.sample_from_nodes": "PyG sampler",
    }
    labels, values = [], []
    for name, value in rows:
        base, _, mode = name.partition(" (")
        labels.append(
            f"{short.get(base, base)}{', replace' if mode.startswith('replace=True') else ''}"
        )
        values.append(value / 1000)
    fig, ax = plt.subplots(figsize=(6.5, 0.8 + 0.4 * len(rows)), dpi=100)
    ax.barh(
        labels,
        values,
        color=["#2b6cb0" if label.startswith("kg_data") else "#a0aec0" for label in labels],
    )
    ax.invert_yaxis()
    ax.set_xlabel("thousand seeds / s (2-hop [10, 10], batches of 1024)")
    ax.set_title("Neighbor sampling on lfm1m, higher is better")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--raw",
        type=Path,
        default=SHARED_DATA / "lfm1m-kgat",
        help="raw KGAT dir to ingest (default: ../shared/data/lfm1m-kgat)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=1024, help="seeds per batch (default 1024)"
    )
    parser.add_argument(
        "--fanouts", type=int, nargs="+", default=[10, 10], help="per-hop fanouts (default 10 10)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed epochs per measurement; the median is kept (default 3)",
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print the table, do not touch BENCHMARKS.md"
    )
    args = parser.parse_args(argv)

    import torch

    import kg_data
    from kg_data import CKG, BPRNegativeSampler, KGDataset, KGNegativeSampler
    from kg_data.csr import build_csr

    if not args.raw.is_dir():
        print(
            f"error: {args.raw} not found; pass --raw DIR (a KGAT dir such as lfm1m-kgat)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        ds = KGDataset.open(kg_data.ingest(args.raw, Path(tmp) / "ds", progress=False).path)
        build_s = timed(lambda: CKG.from_dataset(ds, cache=False), 1)
        CKG.from_dataset(ds)
        cached_s = timed(lambda: CKG.from_dataset(ds), args.repeats)
        ckg = CKG.from_dataset(ds)
        pairs, triples = ds.pairs("train"), ds.triples_array()

    heads, tails, rels = ckg.coo()
    polars_csr_s = timed(lambda: build_csr(heads, tails, rels, ckg.num_nodes), args.repeats)
    numpy_csr_s = timed(lambda: csr_numpy(heads, tails, rels, ckg.num_nodes), args.repeats)

    batches = seed_batches(ckg.num_nodes, args.batch_size, seed=0)
    n_seeds = ckg.num_nodes
    fan = list(args.fanouts)
    results: list[tuple[str, float]] = []
    for replace in (False, True):
        results.append(
            (
                f"kg_data NeighborSampler (replace={replace})",
                n_seeds / timed(ours(ckg, batches, fan, replace), args.repeats),
            )
        )
    pyg_missing = pyg_available()
    if pyg_missing is None:
        for replace in (False, True):
            loader_epoch, raw_epoch = pyg_runs(ckg, batches, fan, replace)
            results.append(
                (
                    f"PyG NeighborLoader (replace={replace})",
                    n_seeds / timed(loader_epoch, args.repeats),
                )
            )
            results.append(
                (
                    f"PyG NeighborSampler.sample_from_nodes (replace={replace})",
                    n_seeds / timed(raw_epoch, args.repeats),
                )
            )
    else:
        print(f"PyG comparison skipped: {pyg_missing}", file=sys.stderr)
    rate = dict(results)

    bpr = BPRNegativeSampler(pairs, ds.n_items, seed=0)
    kg_neg = KGNegativeSampler(triples, ds.n_entities, seed=0)
    bpr_s = timed(lambda: bpr.sample(pairs[:, 0]), args.repeats)
    positive_keys = np.unique(
        pairs[:, 0] * ds.n_items + pairs[:, 1]
    )  # built once, like our sampler's index
    reject_s = timed(
        lambda: rejection_negatives(
            positive_keys, pairs[:, 0], ds.n_items, np.random.default_rng(0)
        ),
        args.repeats,
    )
    kg_s = timed(lambda: kg_neg.sample(triples[:, 0], triples[:, 1]), args.repeats)

    fanout_text = ", ".join(map(str, fan))
    rows = [[name, f"{value:,.0f}"] for name, value in results]
    body = [
        f"Graph: lfm1m CKG, {ckg.num_nodes:,} nodes, {ckg.num_edges:,} edges, {ckg.num_relations} relations. "
        f"One epoch = every node once as a seed, in batches of {args.batch_size}, {len(fan)}-hop [{fanout_text}]; "
        f"median of {args.repeats} epochs; torch threads: {torch.get_num_threads()}. "
        "Ours includes the conversion to torch tensors; PyG's loader includes its `Data` collation.",
        "",
        markdown_table(["sampler", "seeds / s"], rows),
        "",
    ]
    ours_rate = rate["kg_data NeighborSampler (replace=False)"]
    if pyg_missing is None:
        for replace in (False, True):
            mine = rate[f"kg_data NeighborSampler (replace={replace})"]
            body.append(
                f"- replace={replace}: ours / PyG NeighborLoader = **{mine / rate[f'PyG NeighborLoader (replace={replace})']:.2f}x**, "
                f"ours / PyG raw sampler = **{mine / rate[f'PyG NeighborSampler.sample_from_nodes (replace={replace})']:.2f}x**"
            )
    else:
        body.append(f"- PyG not measured in this run: {pyg_missing}.")
    body += [
        "",
        markdown_table(
            ["other figure", "value"],
            [
                ["CKG build from Parquet (no cache)", f"{build_s:.3f} s"],
                [
                    "CKG open from cache",
                    f"{cached_s * 1000:.1f} ms ({build_s / cached_s:.0f}x faster than building)",
                ],
                [
                    "CSR sort + dedup: Polars vs numpy packed-key np.unique",
                    f"{polars_csr_s:.3f} s vs {numpy_csr_s:.3f} s ({numpy_csr_s / polars_csr_s:.2f}x)",
                ],
                [
                    "BPR negatives (one draw, exact redraw of the rejected; all train pairs)",
                    f"{len(pairs) / bpr_s:,.0f} pairs/s",
                ],
                [
                    "BPR negatives, redraw-until-accepted baseline",
                    f"{len(pairs) / reject_s:,.0f} pairs/s (ours {reject_s / bpr_s:.2f}x)",
                ],
                [
                    "KG corrupted-tail negatives (all triples)",
                    f"{len(triples) / kg_s:,.0f} triples/s",
                ],
            ],
        ),
    ]
    section = section_name("sampling", "cpu", args.raw.name)
    figure = None if args.no_write else plot(results, FIGURES / figure_name(section))
    if figure is not None:
        body += ["", f"![seeds per second]({figure.relative_to(FIGURES.parent.parent).as_posix()})"]
    text = "\n".join(body)
    print(text)
    print(f"\nours [{fanout_text}] without replacement: {ours_rate:,.0f} seeds/s")
    publish_section(
        section,
        "Neighbor sampling and negatives (kg_data)",
        text,
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
