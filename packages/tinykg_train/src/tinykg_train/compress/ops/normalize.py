"""`l2_normalize`: x / max(||x||, eps) along `dim` (exactly `F.normalize`), saving the output.

Saves y = x / n (compressed with `config.bits < 32`, at least `config.normalize_bits` wide: the
gradient is quadratic in y, so its rounding costs more here than anywhere else) and the norms (one
float per row, kept exact: the gradient divides by them). The two also hold the input, x = y * n, so
an op that saves x later in the step (KGAT's next layer) reuses them instead of storing x again
(`codec.offer_rescaled`). Gradient: (g - y * sum(g * y)) / n where
||x|| >= eps, g / eps where the norm was clamped.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tinykg_train.compress.codec import compress, offer_rescaled
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.saving import apply_compressed, load, save


class L2Normalize(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, dim: int, eps: float, config: CompressionConfig
    ) -> torch.Tensor:
        norm = x.norm(p=2, dim=dim, keepdim=True)
        out = x / norm.clamp_min(eps)  # F.normalize's own arithmetic, with the norms computed once
        stored = compress(out, config.for_normalized())
        save(ctx, stored, norm)
        offer_rescaled(x, stored, norm, eps, config.for_normalized())
        ctx.dim, ctx.eps = dim, eps
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        out, norm = load(ctx)
        radial = (grad * out).sum(dim=ctx.dim, keepdim=True) * (norm >= ctx.eps)
        # (g - y <g, y>) / n, in one buffer
        grad_x = torch.addcmul(grad, out, radial, value=-1).div_(norm.clamp_min(ctx.eps))
        return grad_x, None, None, None


def l2_normalize(
    x: torch.Tensor, dim: int = -1, eps: float = 1e-12, *, config: CompressionConfig
) -> torch.Tensor:
    """`F.normalize(x, p=2, dim=dim, eps=eps)`; with `config.bits < 32` the output is saved compressed
    (per `config.for_normalized()`)."""
    if not config.enabled:
        return F.normalize(x, p=2.0, dim=dim, eps=eps)
    return apply_compressed(L2Normalize, x, dim, eps, config)
