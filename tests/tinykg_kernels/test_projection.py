"""EXACT's random projection: shapes, regeneration from the seed, unbiased reconstruction."""

from __future__ import annotations

import pytest
import torch

from tinykg_kernels import project, unproject
from tinykg_kernels.projection import projected_dim, rademacher_matrix


@pytest.mark.parametrize(("dim", "ratio", "k"), [(64, 4, 16), (64, 1, 64), (10, 3, 4), (3, 8, 1)])
def test_projected_width(dim, ratio, k):
    assert projected_dim(dim, ratio) == k
    assert project(torch.randn(5, dim), ratio, seed=0).shape == (5, k)


def test_matrix_is_rademacher_and_regenerated_from_the_seed_alone():
    r = rademacher_matrix(64, 16, seed=7)
    assert torch.equal(r, rademacher_matrix(64, 16, seed=7))
    assert not torch.equal(r, rademacher_matrix(64, 16, seed=8))
    assert set((r * 4).unique().tolist()) == {-1.0, 1.0}  # entries +-1/sqrt(16)


def test_reconstruction_is_unbiased_over_seeds():
    """E[R R^T] = I: the mean reconstruction converges to x; a fixed seed does not (control)."""
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    n = 1000
    rebuilt = torch.stack([unproject(project(x, 4, s), 32, s) for s in range(n)])
    # per entry, the reconstruction's std is at most |x_row| / sqrt(k)
    bound = x.norm(dim=1, keepdim=True) / projected_dim(32, 4) ** 0.5 / n**0.5
    assert ((rebuilt.mean(0) - x).abs() / bound).max() < 5
    fixed = unproject(project(x, 4, 0), 32, 0)
    assert ((fixed - x).abs() / bound).max() > 5


def test_works_on_any_leading_shape_and_dtype():
    x = torch.randn(2, 3, 40, dtype=torch.bfloat16)
    y = project(x, 2.5, seed=1)
    assert y.shape == (2, 3, 16) and y.dtype == torch.bfloat16
    assert unproject(y, 40, seed=1).shape == x.shape


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: project(torch.randn(3, 4), 0.5, 0), "ratio must be a number >= 1"),
        (lambda: project(torch.randn(3, 4), 2, -1), "seed must be an integer"),
        (lambda: project(torch.arange(4), 2, 0), "floating-point tensor"),
        (lambda: unproject(torch.randn(3, 2), 0, 0), "dim must be the positive last dim"),
    ],
)
def test_bad_arguments_raise_one_clear_line(call, fragment):
    with pytest.raises(ValueError, match=fragment) as info:
        call()
    assert "\n" not in str(info.value)
