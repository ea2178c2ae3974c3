"""The shared chi-square helper against published tables and an obviously biased sample."""

from __future__ import annotations

import numpy as np
import pytest

from tests.chi_square import chi_square, chi_square_critical


def test_chi_square_critical_matches_tables():
    # Published quantiles: 0.999 of dof 19 -> 43.82; 0.9999 of dof 9 -> 33.72.
    assert chi_square_critical(19, 1e-3) == pytest.approx(43.82, abs=0.01)
    assert chi_square_critical(9) == pytest.approx(33.72, abs=0.01)


def test_chi_square_is_zero_for_equal_counts_and_large_for_skewed_ones():
    assert chi_square(np.full(10, 50)) == 0.0
    assert chi_square(np.array([95] + [5] * 9)) > chi_square_critical(9)
