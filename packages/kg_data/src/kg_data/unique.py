"""Distinct values of large integer arrays by sorting, not hashing.

numpy 2.4's `np.unique` finds an integer array's distinct values with a hash table, then sorts
them. On arrays of millions of mostly distinct keys, which is what the negative samplers build
(`user * n_items + item`, `(head, relation) * n_entities + tail`), the hash table's random
accesses make it 10-20x slower than a sort and one comparison of neighbours (1M keys: 1.2 s
against 0.1 s on this project's 2-core CPU; at 100M triples + interactions its calls took 150 s of
a session's opening). The results are the same arrays.
"""

from __future__ import annotations

import numpy as np


def unique_of_sorted(sorted_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, index of each one's first occurrence) of an ascending 1-d array: what
    `np.unique(sorted_values, return_index=True)` returns, in one pass."""
    sorted_values = np.asarray(sorted_values)
    first = np.ones(len(sorted_values), dtype=bool)
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    return sorted_values[starts], starts


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` of a 1-d array (ascending distinct values), by sort and compare."""
    ordered = np.sort(np.asarray(values).ravel())
    return unique_of_sorted(ordered)[0]


def sorted_unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(values, return_inverse=True)` of a 1-d array: (ascending distinct values, each
    value's position among them), from one stable argsort; no binary search of every value."""
    values = np.asarray(values).ravel()
    order = np.argsort(values, kind="stable")
    distinct, starts = unique_of_sorted(values[order])
    run = np.zeros(len(values), dtype=np.int64)
    run[starts[1:]] = 1
    inverse = np.empty(len(values), dtype=np.int64)
    inverse[order] = np.cumsum(run)
    return distinct, inverse


def distinct_ids(ids: np.ndarray, n: int) -> np.ndarray:
    """`np.unique(ids)` of ids known to lie in `0..n-1` (users, items, entities), in `ids`' dtype:
    one pass over a boolean mask of `n`, no sort."""
    ids = np.asarray(ids)
    seen = np.zeros(n, dtype=bool)
    seen[ids] = True
    return np.flatnonzero(seen).astype(ids.dtype, copy=False)
