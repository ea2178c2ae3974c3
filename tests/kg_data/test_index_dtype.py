"""Narrow id/key arrays: int32 exactly while the values fit, and searches that never widen them."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from kg_data.index_dtype import (
    INT32_MAX,
    narrow_codes,
    narrow_index,
    narrowest_index_dtype,
    search_sorted,
)


@pytest.mark.parametrize(
    ("max_value", "dtype"),
    [
        (0, np.int32),
        (INT32_MAX, np.int32),
        (INT32_MAX + 1, np.int64),
        (250_000 * 250_000, np.int64),  # a user * n_items + item key at 250k users and items
    ],
)
def test_narrowest_index_dtype_is_int32_exactly_while_the_values_fit(max_value, dtype):
    assert narrowest_index_dtype(max_value) is dtype


def test_narrow_index_keeps_the_values_and_chooses_by_the_maximum():
    fits = narrow_index(np.array([3, INT32_MAX, 0], np.int64))
    assert fits.dtype == np.int32 and fits.tolist() == [3, INT32_MAX, 0]
    over = narrow_index(np.array([3, INT32_MAX + 1], np.int64))
    assert over.dtype == np.int64 and over.tolist() == [3, INT32_MAX + 1]
    assert narrow_index(np.empty(0, np.int64)).dtype == np.int32
    wide = np.arange(4, dtype=np.int64).reshape(2, 2)
    assert narrow_index(wide).shape == (2, 2)


@pytest.mark.parametrize(
    ("top", "dtype"),
    [(0, np.int8), (127, np.int8), (128, np.int16), (32_767, np.int16), (32_768, np.int32),
     (INT32_MAX, np.int32), (INT32_MAX + 1, np.int64)],
)  # fmt: skip
def test_narrow_codes_takes_the_narrowest_type_that_holds_the_largest_code(top, dtype):
    codes = np.array([top, 0, top // 2], np.int64)
    narrow = narrow_codes(codes)
    assert narrow.dtype == dtype and narrow.tolist() == codes.tolist()


@pytest.mark.parametrize("side", ["left", "right"])
def test_search_sorted_matches_numpy_on_the_widened_array(side):
    rng = np.random.default_rng(0)
    values = np.sort(rng.integers(0, INT32_MAX, 1000)).astype(np.int32)
    values[-3:] = INT32_MAX  # the largest int32, where a query beyond it must land after it
    queries = np.concatenate(
        [rng.integers(0, INT32_MAX, 200), values[:50], [-1, INT32_MAX, INT32_MAX + 1, 2**40]]
    )
    for batch in (queries, queries[:-3], queries[:0]):  # with and without queries beyond int32
        expected = np.searchsorted(values.astype(np.int64), batch, side=side)
        assert search_sorted(values, batch, side=side).tolist() == expected.tolist()


def test_search_sorted_does_not_copy_the_sorted_array():
    values = np.arange(0, 8_000_000, 2, dtype=np.int32)  # 16 MB; an int64 copy would be 32 MB
    queries = np.arange(0, 8_000_000, 997, dtype=np.int64)
    tracemalloc.start()
    try:
        search_sorted(values, queries)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < values.nbytes // 4
