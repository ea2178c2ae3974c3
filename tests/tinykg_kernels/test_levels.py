"""The `normal` scheme's levels: float32-exact, symmetric, and the variance optimum they claim."""

from __future__ import annotations

import pytest
import torch

from tinykg_kernels.levels import (
    clip_for,
    expected_max_of_normals,
    interval_constants,
    normal_levels,
    rounding_variance,
)


@pytest.mark.parametrize("group_len", [1, 2, 7, 64, 1000])
def test_levels_are_ordered_symmetric_and_float32_exact(group_len):
    levels = normal_levels(group_len)
    assert levels[0] == 0.0 and levels[3] == 1.0
    assert 0.0 < levels[1] < 0.5 < levels[2] < 1.0
    assert levels[1] + levels[2] == pytest.approx(1.0, abs=1e-6)
    assert torch.tensor(levels, dtype=torch.float32).tolist() == list(levels)


def test_inner_levels_move_inward_as_groups_grow():
    """Bigger groups have rarer extremes: the bulk sits mid-range and the inner levels follow it."""
    inner = [normal_levels(n)[1] for n in (2, 8, 64, 1024)]
    assert inner == sorted(inner) and inner[0] == pytest.approx(1 / 3, abs=0.01)


def test_expected_max_of_normals_tracks_a_monte_carlo_estimate():
    draws = torch.randn(20_000, 64, generator=torch.Generator().manual_seed(0))
    empirical = draws.max(dim=1).values.mean().item()
    assert expected_max_of_normals(1) == 0.0
    assert expected_max_of_normals(64) == pytest.approx(empirical, abs=0.05)


def test_closed_form_variance_matches_a_monte_carlo_estimate_of_the_model():
    """Sample the clipped normal, map it onto [0, 1], average (t - l_i) * (l_(i+1) - t)."""
    group_len, levels = 64, (0.0, 0.3, 0.7, 1.0)
    k = clip_for(group_len)
    z = torch.randn(2_000_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    t = (z[z.abs() <= k] / k + 1.0) / 2.0
    grid = torch.tensor(levels, dtype=torch.float64)
    upper = torch.searchsorted(grid, t, right=True).clamp(1, 3)
    sampled = ((t - grid[upper - 1]) * (grid[upper] - t)).mean().item()
    assert rounding_variance(levels, group_len) == pytest.approx(sampled, rel=2e-3)


@pytest.mark.parametrize("group_len", [16, 64])
def test_levels_minimize_the_modelled_variance(group_len):
    p = normal_levels(group_len)[1]

    def cost(inner: float) -> float:
        return rounding_variance((0.0, inner, 1.0 - inner, 1.0), group_len)

    assert cost(p) < cost(p - 0.01) and cost(p) < cost(p + 0.01)
    assert cost(p) < cost(1 / 3)  # better than uniform thirds under the model


def test_interval_constants_are_inverse_widths():
    levels, inverse_widths = interval_constants(64)
    widths = [levels[i + 1] - levels[i] for i in range(3)]
    for width, inverse in zip(widths, inverse_widths, strict=True):
        assert width * inverse == pytest.approx(1.0, rel=1e-6)
