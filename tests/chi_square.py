"""Chi-square goodness of fit for the samplers' uniformity tests (shared by the tests that need it).

`chi_square(counts) < chi_square_critical(len(counts) - 1)` accepts a sampler whose draws are equally
likely; at the default p = 1e-4 a correct sampler fails one run in 10,000 (and the tests' seeds are
fixed, so never flakily).
"""

from __future__ import annotations

import numpy as np
import torch


def chi_square_critical(dof: int, p_value: float = 1e-4) -> float:
    """Upper critical value of chi-square with `dof` degrees of freedom: P(X > value) = p_value.

    Bisection on the survival function, the regularized upper incomplete gamma Q(dof/2, x/2).
    """
    half_dof = torch.tensor(dof / 2, dtype=torch.float64)
    low, high = 0.0, 10.0 * dof + 100.0
    for _ in range(80):
        mid = (low + high) / 2
        survival = torch.special.gammaincc(
            half_dof, torch.tensor(mid / 2, dtype=torch.float64)
        ).item()
        low, high = (mid, high) if survival > p_value else (low, mid)
    return low


def chi_square(counts: np.ndarray) -> float:
    """Pearson's statistic of `counts` against equal expected counts."""
    expected = counts.sum() / len(counts)
    return float(((counts - expected) ** 2 / expected).sum())
