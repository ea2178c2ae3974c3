"""The four 2-bit levels of `scheme="normal"`, fitted to a clipped normal to minimize rounding variance.

Each group is mapped onto [0, 1] by its own min and max, and its values are modelled as a standard
normal clipped to [-k, k], where k is the expected maximum of `group_len` normal draws (Blom's
approximation): the min and max of the group sit at the ends, the bulk of the values in the middle.
Stochastic rounding between adjacent levels `l_i <= t <= l_{i+1}` is unbiased and adds variance
`(t - l_i) * (l_{i+1} - t)`; the levels `(0, p, 1 - p, 1)` take the `p` that minimizes the expected
variance under that density (symmetric, so one parameter; the ends stay at min and max so every
value is covered). Small groups give a nearly flat density and levels close to uniform thirds;
larger groups pull the inner levels towards the middle. The levels depend only on `group_len`, so
they are recomputed at dequantize time and never stored. The expected variance has a closed form
(normal moments on each interval), so fitting takes microseconds.
"""

from __future__ import annotations

import functools
import math

import torch

_SEARCH_STEPS = 60  # golden-section steps: the bracket shrinks by 0.618**60 ~ 3e-13


def expected_max_of_normals(n: int) -> float:
    """Blom's approximation of the expected maximum of `n` standard normal draws (0 for n = 1)."""
    q = (n - 0.375) / (n + 0.25)
    return (
        math.sqrt(2.0)
        * torch.special.erfinv(torch.tensor(2.0 * q - 1.0, dtype=torch.float64)).item()
    )


def _pdf(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def _cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def _interval_variance(u: float, v: float) -> float:
    """The integral of `(z - u) * (v - z) * pdf(z)` over [u, v], from the normal's moments there."""
    m0 = _cdf(v) - _cdf(u)
    m1 = _pdf(u) - _pdf(v)
    m2 = m0 + u * _pdf(u) - v * _pdf(v)
    return -m2 + (u + v) * m1 - u * v * m0


def clip_for(group_len: int) -> float:
    """k: where a group of `group_len` normal values is clipped (its expected extremes)."""
    return max(expected_max_of_normals(group_len), 1e-3)


def rounding_variance(levels: tuple[float, ...], group_len: int) -> float:
    """Expected variance (in units of the group's range squared) of stochastic rounding onto sorted
    `levels` in [0, 1], for values from the clipped normal model of a group of `group_len`."""
    k = clip_for(group_len)
    z = [(2.0 * level - 1.0) * k for level in levels]  # t in [0, 1] <-> z in [-k, k]
    total = sum(_interval_variance(a, b) for a, b in zip(z[:-1], z[1:], strict=True))
    return total / (4.0 * k * k * (_cdf(k) - _cdf(-k)))


@functools.cache
def normal_levels(group_len: int) -> tuple[float, float, float, float]:
    """The levels `(0, p, 1 - p, 1)` for groups of `group_len` values, each exact in float32."""
    cost = lambda p: rounding_variance((0.0, p, 1.0 - p, 1.0), group_len)  # noqa: E731
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
    p = (lo + hi) / 2.0
    levels = torch.tensor([0.0, p, 1.0 - p, 1.0]).to(torch.float32)
    return tuple(float(v) for v in levels)


@functools.cache
def interval_constants(group_len: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(levels, 1 / width of each of the 3 intervals), all float32-exact, for both backends alike."""
    levels = torch.tensor(normal_levels(group_len), dtype=torch.float32)
    inverse_widths = 1.0 / (levels[1:] - levels[:-1])
    return tuple(levels.tolist()), tuple(inverse_widths.tolist())
