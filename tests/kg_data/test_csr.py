"""CSR construction and the per-row samplers, against plain-Python references and chi-square tests."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np

from kg_data.csr import (
    TAKE_ALL,
    _build_csr_columns,
    build_csr,
    sample_rows,
    segment_ids,
    segment_offsets,
)
from tests.chi_square import chi_square, chi_square_critical


def test_build_csr_matches_python_reference_and_drops_duplicates():
    rng = np.random.default_rng(0)
    src, dst, rel = rng.integers(0, 30, 400), rng.integers(0, 30, 400), rng.integers(0, 4, 400)
    indptr, indices, relation = build_csr(src, dst, rel, 32)
    reference: dict[int, set[tuple[int, int]]] = {}
    for s, d, r in zip(src.tolist(), dst.tolist(), rel.tolist(), strict=True):
        reference.setdefault(s, set()).add((r, d))
    assert len(indptr) == 33 and indptr[-1] == len(indices)
    for row in range(32):
        got = list(
            zip(
                relation[indptr[row] : indptr[row + 1]].tolist(),
                indices[indptr[row] : indptr[row + 1]].tolist(),
                strict=True,
            )
        )
        assert got == sorted(reference.get(row, set())), row
    assert indices.dtype == np.int64 and relation.dtype == np.int64


def test_build_csr_packed_keys_match_the_three_column_build():
    rng = np.random.default_rng(3)
    src, dst, rel = rng.integers(0, 500, 20_000), rng.integers(0, 700, 20_000), rng.integers(0, 9, 20_000)
    packed = build_csr(src, dst, rel, 520)
    columns = _build_csr_columns(src, dst, rel, 520)
    for a, b in zip(packed, columns, strict=True):
        assert a.dtype == b.dtype == np.int64 and np.array_equal(a, b)
    assert packed[0][-1] < 20_000  # duplicates were drawn, and dropped
    assert all(a.flags.writeable for a in packed)  # torch.from_numpy takes them as they are


def test_build_csr_ids_too_large_to_pack_take_the_three_column_path():
    # 32 rows x 2**30 relations x 2**40 destinations overflows a 63-bit key
    src = np.array([3, 3, 1, 3])
    dst = np.array([2**40, 5, 2**40, 2**40])
    rel = np.array([2**30, 7, 0, 2**30])
    indptr, indices, relation = build_csr(src, dst, rel, 32)
    assert indptr[1:5].tolist() == [0, 1, 1, 3]  # row 1: one edge; row 3: two, one twice
    assert indices.tolist() == [2**40, 5, 2**40] and relation.tolist() == [0, 7, 2**30]


def test_build_csr_of_no_edges_is_empty_rows():
    indptr, indices, relation = build_csr(np.array([], np.int64), np.array([], np.int64), np.array([], np.int64), 4)
    assert indptr.tolist() == [0] * 5 and len(indices) == len(relation) == 0


def test_segment_helpers():
    lengths = np.array([2, 0, 3])
    assert segment_ids(lengths).tolist() == [0, 0, 2, 2, 2]
    assert segment_offsets(lengths).tolist() == [0, 1, 0, 1, 2]


def test_sample_rows_without_replacement_takes_distinct_positions_within_each_row():
    degrees = np.array([0, 3, 5, 12, 40, 7])
    starts = np.cumsum(degrees) - degrees + 100
    which, positions = sample_rows(starts, degrees, 5, np.random.default_rng(1), replace=False)
    assert np.all(np.diff(which) >= 0)
    for row, degree in enumerate(degrees):
        mine = positions[which == row]
        assert len(mine) == min(degree, 5)
        assert len(set(mine.tolist())) == len(mine)
        assert np.all((mine >= starts[row]) & (mine < starts[row] + degree))


def test_sample_rows_with_replacement_and_take_all():
    degrees = np.array([0, 3, 9])
    starts = np.array([0, 0, 3])
    which, positions = sample_rows(starts, degrees, 6, np.random.default_rng(2), replace=True)
    assert np.bincount(which, minlength=3).tolist() == [0, 6, 6]
    assert np.all((positions >= starts[which]) & (positions < starts[which] + degrees[which]))
    for replace in (False, True):
        which, positions = sample_rows(
            starts, degrees, TAKE_ALL, np.random.default_rng(2), replace=replace
        )
        assert positions.tolist() == list(range(12))


def test_sample_rows_per_row_k():
    degrees = np.array([10, 10, 10])
    which, _ = sample_rows(
        np.array([0, 10, 20]), degrees, np.array([1, 4, 0]), np.random.default_rng(3), replace=False
    )
    assert np.bincount(which, minlength=3).tolist() == [1, 4, 0]


def subset_counts(draw, rows: int, degree: int, k: int) -> np.ndarray:
    """How often each k-subset of range(degree) came out, over `rows` identical rows."""
    which, positions = draw(rows, degree, k)
    subsets = np.sort(positions.reshape(rows, k), axis=1)
    index = {combo: i for i, combo in enumerate(itertools.combinations(range(degree), k))}
    counts = Counter(index[tuple(s)] for s in subsets.tolist())
    return np.array([counts.get(i, 0) for i in range(len(index))])


def floyd_draw(rows: int, degree: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    degrees = np.full(rows, degree)
    return sample_rows(
        np.zeros(rows, np.int64), degrees, k, np.random.default_rng(4), replace=False
    )


def sliding_window_draw(rows: int, degree: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A plausible but wrong sampler: k consecutive positions from a random start (uniform marginals only)."""
    start = np.random.default_rng(4).integers(0, degree, rows)
    positions = (start[:, None] + np.arange(k)) % degree
    return np.repeat(np.arange(rows), k), positions.ravel()


def test_every_subset_is_equally_likely_chi_square():
    counts = subset_counts(floyd_draw, 20_000, 6, 3)
    assert counts.min() > 0
    assert chi_square(counts) < chi_square_critical(len(counts) - 1)


def test_subset_chi_square_catches_a_biased_sampler():
    counts = subset_counts(sliding_window_draw, 20_000, 6, 3)
    assert chi_square(counts) > chi_square_critical(len(counts) - 1)


def test_with_replacement_draws_are_uniform_chi_square():
    which, positions = sample_rows(
        np.zeros(5000, np.int64), np.full(5000, 10), 4, np.random.default_rng(5), replace=True
    )
    counts = np.bincount(positions, minlength=10)
    assert chi_square(counts) < chi_square_critical(9)
