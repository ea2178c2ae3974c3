"""Id and key arrays kept for a whole run, stored in the narrowest of int32/int64 that holds them.

The loaders and the evaluator hold their (user, item) pairs, triples, sorted negative-sampling keys
and CSR pointers from the first epoch to the last: about 490 MiB as int64 at 10M triples +
interactions. Ids (< 2**31) fit int32, half the bytes; a key such as `user * n_items + item` does
only while the product stays below 2**31, so each array's dtype is chosen from its own maximum.

Reading a narrow array must not widen it back: `np.searchsorted` converts the sorted array to the
queries' dtype when the two differ (a full copy on every call), so `search_sorted` narrows the
queries, a batch's worth, instead.
"""

from __future__ import annotations

import numpy as np

INT32_MAX = int(np.iinfo(np.int32).max)


def narrowest_index_dtype(max_value: int) -> type[np.signedinteger]:
    """int32 when values up to `max_value` (non-negative ids or keys) fit it, else int64."""
    return np.int32 if max_value <= INT32_MAX else np.int64


def narrow_index(values: np.ndarray) -> np.ndarray:
    """Non-negative integer `values` in `narrowest_index_dtype` of their maximum (no copy when
    they already have that dtype)."""
    values = np.asarray(values)
    return values.astype(narrowest_index_dtype(int(values.max(initial=0))), copy=False)


def narrow_codes(values: np.ndarray) -> np.ndarray:
    """Non-negative integer codes with few distinct values (relation ids) in the narrowest of
    int8/int16/int32/int64 that holds their maximum (no copy when they already have it): a CKG's
    per-edge relation ids fit int8, a quarter of int32's bytes (504 MiB less at 176M edges)."""
    values = np.asarray(values)
    top = int(values.max(initial=0))
    dtype = next(t for t in (np.int8, np.int16, np.int32, np.int64) if top <= np.iinfo(t).max)
    return values.astype(dtype, copy=False)


def search_sorted(sorted_values: np.ndarray, queries: np.ndarray, side: str = "left") -> np.ndarray:
    """`np.searchsorted(sorted_values, queries, side)` without converting `sorted_values`: queries
    that all fit its dtype are cast to it, which leaves every position the same. (Queries beyond
    it, which the loaders never make, are answered through numpy's widened copy: right, slow.)"""
    queries = np.asarray(queries)
    info = np.iinfo(sorted_values.dtype)
    if queries.size == 0 or (queries.min() >= info.min and queries.max() <= info.max):
        queries = queries.astype(sorted_values.dtype, copy=False)
    return np.searchsorted(sorted_values, queries, side=side)
