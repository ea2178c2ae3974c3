"""Compressed sparse rows and vectorized per-row sampling on them (numpy only).

`build_csr` turns an edge list into (indptr, indices, relation) with duplicate edges removed and each
row sorted by (relation, neighbor). `sample_rows` draws up to `k` edge positions per requested row,
uniformly, with or without replacement, for all rows at once: the only Python loop runs over the
`k` draws, never over rows.
"""

from __future__ import annotations

import numpy as np
import polars as pl

TAKE_ALL = np.iinfo(np.int64).max  # a per-segment k meaning "every position, once"


def build_csr(src: np.ndarray, dst: np.ndarray, rel: np.ndarray, num_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR of the edges (src -> dst, rel): rows are `src`, deduplicated, sorted by (src, rel, dst).

    Polars sorts and drops duplicates (multi-threaded, stable); `np.bincount` gives the row lengths.
    """
    edges = (
        pl.DataFrame({"src": np.asarray(src, np.int64), "rel": np.asarray(rel, np.int64), "dst": np.asarray(dst, np.int64)})
        .unique()
        .sort("src", "rel", "dst")
    )
    rows = edges["src"].to_numpy()
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_rows), out=indptr[1:])
    # np.array copies: Polars hands out read-only views, and torch.from_numpy wants writable arrays.
    return indptr, np.array(edges["dst"].to_numpy(), dtype=np.int64), np.array(edges["rel"].to_numpy(), dtype=np.int64)


def segment_ids(lengths: np.ndarray) -> np.ndarray:
    """For segments of the given lengths laid end to end, the segment index of every element."""
    return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)


def segment_offsets(lengths: np.ndarray) -> np.ndarray:
    """For segments of the given lengths laid end to end, each element's position inside its segment."""
    starts = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)


def sample_rows(
    starts: np.ndarray, degrees: np.ndarray, k: np.ndarray | int, rng: np.random.Generator, *, replace: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Draw up to `k` positions uniformly from each segment `[starts[i], starts[i] + degrees[i])`.

    Returns `(which, positions)` sorted by `which`, the index `i` of each drawn position's segment.
    Without replacement a segment of degree <= k gives all its positions and a longer one a uniform
    k-subset (Floyd's algorithm, run for all segments at once); with replacement a non-empty segment
    gives k independent uniform draws. `k = TAKE_ALL` takes every position once in both modes.
    """
    starts = np.asarray(starts, np.int64)
    degrees = np.asarray(degrees, np.int64)
    k = np.broadcast_to(np.asarray(k, np.int64), degrees.shape)
    take_all = (k == TAKE_ALL) if replace else (degrees <= k)
    all_which = np.flatnonzero(take_all)
    all_lengths = degrees[all_which]
    which_all = np.repeat(all_which, all_lengths)
    offsets_all = segment_offsets(all_lengths)

    rest = np.flatnonzero(~take_all & (degrees > 0))
    if replace:
        which_rest = np.repeat(rest, k[rest])
        offsets_rest = (rng.random(len(which_rest)) * degrees[which_rest]).astype(np.int64)
    else:
        which_rest, offsets_rest = _floyd(degrees[rest], k[rest], rng)
        which_rest = rest[which_rest]
    which = np.concatenate([which_all, which_rest])
    positions = starts[which] + np.concatenate([offsets_all, offsets_rest])
    order = np.argsort(which, kind="stable")
    return which[order], positions[order]


def _floyd(degrees: np.ndarray, k: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Uniform k-subsets of range(degree) for many segments (all with degree > k), vectorized.

    Floyd's algorithm: for j = d-k .. d-1 draw t in [0, j]; keep t unless already chosen, then keep j.
    Each step is one vectorized pass over the segments that still need a draw.
    """
    n, width = len(degrees), int(k.max(initial=0))
    chosen = np.full((n, width), -1, dtype=np.int64)
    for step in range(width):
        active = np.flatnonzero(k > step)
        j = degrees[active] - k[active] + step
        t = (rng.random(len(active)) * (j + 1)).astype(np.int64)
        seen = (chosen[active, :step] == t[:, None]).any(axis=1)
        chosen[active, step] = np.where(seen, j, t)
    mask = chosen >= 0
    return np.nonzero(mask)[0].astype(np.int64), chosen[mask]
