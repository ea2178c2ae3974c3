"""kg_data.unique: sort-based distinct values equal numpy's np.unique, on any integer input."""

from __future__ import annotations

import numpy as np
import pytest

from kg_data.unique import distinct_ids, sorted_unique, sorted_unique_inverse, unique_of_sorted

CASES = {
    "empty": np.array([], dtype=np.int64),
    "one": np.array([7], dtype=np.int64),
    "all equal": np.full(50, 3, dtype=np.int32),
    "negative and duplicated": np.array([5, -2, 5, 0, -2, 9, 9, 9, 1], dtype=np.int64),
    "random int64 keys": np.random.default_rng(0).integers(0, 2**40, 20_000),
    "random int32 with many repeats": np.random.default_rng(1).integers(0, 300, 5_000, np.int32),
}


@pytest.mark.parametrize("values", CASES.values(), ids=CASES.keys())
def test_sorted_unique_equals_numpy(values):
    got = sorted_unique(values)
    want = np.unique(values)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


@pytest.mark.parametrize("values", CASES.values(), ids=CASES.keys())
def test_unique_of_sorted_gives_first_positions(values):
    ordered = np.sort(values)
    distinct, starts = unique_of_sorted(ordered)
    want, want_starts = np.unique(ordered, return_index=True)
    np.testing.assert_array_equal(distinct, want)
    np.testing.assert_array_equal(starts, want_starts)


@pytest.mark.parametrize("values", CASES.values(), ids=CASES.keys())
def test_sorted_unique_inverse_equals_numpy(values):
    distinct, inverse = sorted_unique_inverse(values)
    want, want_inverse = np.unique(values, return_inverse=True)
    np.testing.assert_array_equal(distinct, want)
    np.testing.assert_array_equal(inverse, want_inverse)
    np.testing.assert_array_equal(distinct[inverse], values)


def test_distinct_ids_equals_numpy_within_the_id_range():
    rng = np.random.default_rng(2)
    for dtype in (np.int32, np.int64):
        ids = rng.integers(0, 1_000, 3_000).astype(dtype)
        got = distinct_ids(ids, 1_000)
        np.testing.assert_array_equal(got, np.unique(ids))
        assert got.dtype == dtype
    assert len(distinct_ids(np.array([], dtype=np.int64), 10)) == 0
