"""The four 2-bit levels of `scheme="normal"`, fitted to a clipped normal to minimize rounding variance.

Each group is mapped onto [0, 1] by its own min and max, and its values are modelled as a standard
normal clipped to [-k, k], where k is the expected maximum of `group_len` normal draws (Blom's
approximation): the min and max of the group sit at the ends, the bulk of the values in the middle.
Stochastic rounding between adjacent levels `l_i <= t <= l_{i+1}` is unbiased and adds variance
`(t - l_i) * (l_{i+1} - t)`; the levels `(0, p, 1 - p, 1)` take the `p` that minimizes the expected
variance under that density (symmetric, so one parameter; the ends stay at min and max so every
value is covered). Small groups give a nearly flat density and levels close to uniform thirds;
larger groups pull the inner levels towards the middle. The levels depend only on `group_len`, so
they are recomputed at dequantize time and never stored.
"""

from __future__ import annotations

import functools
import math

import torch

_GRID = 20_001  # integration points on [0, 1]
_SEARCH_STEPS = 80  # golden-section iterations: far below float32 resolution of p


def expected_max_of_normals(n: int) -> float:
    """Blom's approximation of the expected maximum of `n` standard normal draws (0 for n = 1)."""
    q = (n - 0.375) / (n + 0.25)
    return (
        math.sqrt(2.0)
        * torch.special.erfinv(torch.tensor(2.0 * q - 1.0, dtype=torch.float64)).item()
    )


def rounding_variance(levels: torch.Tensor, density: torch.Tensor, grid: torch.Tensor) -> float:
    """Expected variance of stochastic rounding onto sorted `levels` for values drawn from `density`."""
    upper = torch.searchsorted(levels, grid, right=True).clamp(1, len(levels) - 1)
    lo, hi = levels[upper - 1], levels[upper]
    variance = (grid - lo) * (hi - grid)
    return (torch.trapezoid(variance * density, grid) / torch.trapezoid(density, grid)).item()


def clipped_normal_density(group_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(grid on [0, 1], unnormalized density of the clipped normal mapped onto it)."""
    grid = torch.linspace(0.0, 1.0, _GRID, dtype=torch.float64)
    k = max(expected_max_of_normals(group_len), 1e-3)
    z = (2.0 * grid - 1.0) * k
    return grid, torch.exp(-0.5 * z * z)


def _levels(p: float) -> torch.Tensor:
    return torch.tensor([0.0, p, 1.0 - p, 1.0], dtype=torch.float64)


@functools.cache
def normal_levels(group_len: int) -> tuple[float, float, float, float]:
    """The levels `(0, p, 1 - p, 1)` for groups of `group_len` values, each exact in float32."""
    grid, density = clipped_normal_density(group_len)
    cost = lambda p: rounding_variance(_levels(p), density, grid)  # noqa: E731
    lo, hi = 0.05, 0.49  # p in (0, 0.5): inner levels stay distinct and ordered
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    cost_a, cost_b = cost(a), cost(b)
    for _ in range(_SEARCH_STEPS):
        if cost_a < cost_b:
            hi, b, cost_b = b, a, cost_a
            a = hi - ratio * (hi - lo)
            cost_a = cost(a)
        else:
            lo, a, cost_a = a, b, cost_b
            b = lo + ratio * (hi - lo)
            cost_b = cost(b)
    levels = torch.tensor([0.0, (lo + hi) / 2.0, 1.0 - (lo + hi) / 2.0, 1.0]).to(torch.float32)
    return tuple(float(v) for v in levels)


@functools.cache
def interval_constants(group_len: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(levels, 1 / width of each of the 3 intervals), all float32-exact, for both backends alike."""
    levels = torch.tensor(normal_levels(group_len), dtype=torch.float32)
    inverse_widths = 1.0 / (levels[1:] - levels[:-1])
    return tuple(levels.tolist()), tuple(inverse_widths.tolist())
