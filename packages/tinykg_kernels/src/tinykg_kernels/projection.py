"""EXACT's random projection: keep `x @ R` (`ratio` times narrower) instead of `x`, and rebuild
`x ~ (x @ R) @ R.T` when needed.

`R` is a `[dim, k]` Rademacher matrix with entries `+-1/sqrt(k)`, regenerated from `seed` on the
CPU (so it is the same on every device): nothing but the seed is stored. `E[R @ R.T] = I`, so
`unproject(project(x))` is an unbiased estimate of `x` over the draw of `R`.
"""

from __future__ import annotations

import math

import torch

_MAX_SEED = 2**63


def projected_dim(dim: int, ratio: float) -> int:
    """Columns kept for a last dim of `dim` at compression `ratio` (at least 1)."""
    return max(1, math.ceil(dim / ratio))


def rademacher_matrix(
    dim: int,
    k: int,
    seed: int,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The `[dim, k]` matrix of `+-1/sqrt(k)` entries that `seed` stands for."""
    generator = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (dim, k), generator=generator, dtype=torch.int8) * 2 - 1
    return (signs.to(torch.float32) / math.sqrt(k)).to(device=device, dtype=dtype)


def _check(x: object, name: str, seed: object) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0:
        raise ValueError(
            f"{name} expects a floating-point tensor with at least 1 dim (got {x!r:.60})"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < _MAX_SEED:
        raise ValueError(
            f"seed must be an integer in [0, 2**63) (got {seed!r}); store it with the result"
        )


def project(x: torch.Tensor, ratio: float, seed: int) -> torch.Tensor:
    """`x @ R`: the last dim shrinks from `dim` to `ceil(dim / ratio)`; keep `seed` to undo it."""
    _check(x, "project", seed)
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio >= 1:
        raise ValueError(f"ratio must be a number >= 1 (got {ratio!r}); 1 keeps every column")
    dim = x.shape[-1]
    return x @ rademacher_matrix(dim, projected_dim(dim, ratio), seed, x.device, x.dtype)


def unproject(y: torch.Tensor, dim: int, seed: int) -> torch.Tensor:
    """`y @ R.T` with the `R` of `project(x, ratio, seed)`: an unbiased estimate of `x`."""
    _check(y, "unproject", seed)
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be the positive last dim of the projected tensor (got {dim!r})")
    return y @ rademacher_matrix(dim, y.shape[-1], seed, y.device, y.dtype).T
