"""Compressed sparse rows and vectorized per-row sampling on them (numpy; Polars sorts).

`build_csr` turns an edge list into (indptr, indices, relation) with duplicate edges removed and each
row sorted by (relation, neighbor). `sample_rows` draws up to `k` edge positions per requested row,
uniformly, with or without replacement, for all rows at once: the only Python loop runs over the
`k` draws, never over rows.
"""

from __future__ import annotations

import numpy as np
import polars as pl

TAKE_ALL = np.iinfo(np.int64).max  # a per-segment k meaning "every position, once"


def build_csr(
    src: np.ndarray, dst: np.ndarray, rel: np.ndarray, num_rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR of the edges (src -> dst, rel): rows are `src`, deduplicated, sorted by (src, rel, dst).

    Each edge becomes one int64 key, `(src * R + rel) * D + dst` (R, D: one past the largest
    relation and destination), whose order is the (src, rel, dst) order. Polars sorts the one key
    column (multi-threaded), equal neighbours are dropped, and the key splits back into its parts;
    `np.bincount` gives the row lengths. At 17.5M edges that took about 1 s and 0.25 GB above the
    inputs at its peak, where hashing the three columns for `DataFrame.unique` took 7 s and 2.9 GB.
    Edges whose key would not fit in 63 bits (or with negative ids) take the three-column path.
    """
    src, dst, rel = (np.asarray(a, np.int64) for a in (src, dst, rel))
    if len(src) == 0:
        return np.zeros(num_rows + 1, dtype=np.int64), src.copy(), rel.copy()
    n_rel, n_dst = int(rel.max()) + 1, int(dst.max()) + 1
    packable = min(int(src.min()), int(dst.min()), int(rel.min())) >= 0
    if not packable or max(num_rows, int(src.max()) + 1) * n_rel * n_dst >= 2**63:
        return _build_csr_columns(src, dst, rel, num_rows)
    key = src * n_rel
    key += rel
    key *= n_dst
    key += dst
    ordered = pl.Series(key).sort().to_numpy()
    del key
    first = np.empty(len(ordered), dtype=bool)  # the first of each run of equal keys
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    keys = ordered[first]
    del ordered, first
    source_relation, indices = np.divmod(keys, n_dst)
    del keys
    rows, relation = np.divmod(source_relation, n_rel)
    del source_relation
    return _indptr(rows, num_rows), indices, relation


def _build_csr_columns(
    src: np.ndarray, dst: np.ndarray, rel: np.ndarray, num_rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`build_csr` on three columns (Polars' hash `unique`, then a three-key sort): any int64 ids."""
    edges = pl.DataFrame({"src": src, "rel": rel, "dst": dst}).unique().sort("src", "rel", "dst")
    # np.array copies: Polars hands out read-only views, and torch.from_numpy wants writable arrays.
    return (
        _indptr(edges["src"].to_numpy(), num_rows),
        np.array(edges["dst"].to_numpy(), dtype=np.int64),
        np.array(edges["rel"].to_numpy(), dtype=np.int64),
    )


def _indptr(rows: np.ndarray, num_rows: int) -> np.ndarray:
    """Row starts of sorted row ids (`num_rows + 1` of them)."""
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_rows), out=indptr[1:])
    return indptr


def segment_ids(lengths: np.ndarray) -> np.ndarray:
    """For segments of the given lengths laid end to end, the segment index of every element."""
    return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)


def segment_offsets(lengths: np.ndarray) -> np.ndarray:
    """For segments of the given lengths laid end to end, each element's position inside its segment."""
    starts = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)


def sample_rows(
    starts: np.ndarray,
    degrees: np.ndarray,
    k: np.ndarray | int,
    rng: np.random.Generator,
    *,
    replace: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw up to `k` positions uniformly from each segment `[starts[i], starts[i] + degrees[i])`.

    Returns `(which, positions)` grouped by `which`, the index `i` of each drawn position's segment.
    Without replacement a segment of degree <= k gives all its positions and a longer one a uniform
    k-subset (Floyd's algorithm, run for all segments at once); with replacement a non-empty segment
    gives k independent uniform draws. `k = TAKE_ALL` takes every position once in both modes.
    """
    starts = np.asarray(starts, np.int64)
    degrees = np.asarray(degrees, np.int64)
    k = np.broadcast_to(np.asarray(k, np.int64), degrees.shape)
    take_all = (k == TAKE_ALL) if replace else (degrees <= k)
    counts = np.where(take_all, degrees, np.where(degrees > 0, k, 0))
    first = np.cumsum(counts) - counts  # where each segment's draws go in the output
    positions = np.empty(int(counts.sum()), dtype=np.int64)

    every = np.flatnonzero(take_all)
    which, within = segment_ids(degrees[every]), segment_offsets(degrees[every])
    which = every[which]
    positions[first[which] + within] = starts[which] + within

    rest = np.flatnonzero(~take_all & (degrees > 0))
    if replace:
        which, within = segment_ids(k[rest]), segment_offsets(k[rest])
        which = rest[which]
        offsets = (rng.random(len(which)) * degrees[which]).astype(np.int64)
    else:
        which, within, offsets = _floyd(degrees[rest], k[rest], rng)
        which = rest[which]
    positions[first[which] + within] = starts[which] + offsets
    return segment_ids(counts), positions


def _floyd(
    degrees: np.ndarray, k: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Uniform k-subsets of range(degree) for many segments (all with degree > k), vectorized.

    Floyd's algorithm: for j = d-k .. d-1 draw t in [0, j]; keep t unless already chosen, then keep j.
    Each step is one vectorized pass over the segments that still need a draw. Returns
    (segment, draw number, offset in the segment) of every draw.
    """
    n, width = len(degrees), int(k.max(initial=0))
    chosen = np.full((n, width), -1, dtype=np.int64)
    same_k = n == 0 or int(k.min()) == width
    for step in range(width):
        rows = slice(None) if same_k else np.flatnonzero(k > step)
        j = degrees[rows] - k[rows] + step
        t = (rng.random(len(j)) * (j + 1)).astype(np.int64)
        seen = (chosen[rows, :step] == t[:, None]).any(axis=1)
        chosen[rows, step] = np.where(seen, j, t)
    segment, draw = np.nonzero(chosen >= 0)
    return segment, draw, chosen[segment, draw]
