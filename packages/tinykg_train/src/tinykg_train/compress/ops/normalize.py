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

from tinykg_train.compress.blocks import device_budget, spans
from tinykg_train.compress.codec import Compressed, compress, decompress, offer_rescaled
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
        stored, norm = load(ctx, decode=False)
        rows_wise = grad.dim() == 2 and ctx.dim in (1, -1) and isinstance(stored, Compressed)
        if rows_wise and stored.by_rows:
            return _backward_by_rows(grad, stored, norm, ctx.eps), None, None, None
        return _backward(grad, decompress(stored), norm, ctx.dim, ctx.eps), None, None, None


def _backward(grad, out, norm, dim: int, eps: float, result=None) -> torch.Tensor:
    """(g - y <g, y>) / n, in one buffer (`result` when given)."""
    radial = (grad * out).sum(dim=dim, keepdim=True) * (norm >= eps)
    return torch.addcmul(grad, out, radial, value=-1, out=result).div_(norm.clamp_min(eps))


def _backward_by_rows(grad, stored: Compressed, norm, eps: float) -> torch.Tensor:
    """`_backward` of `[rows, dim]` normalized along rows, the stored output decoded a block of
    rows at a time (`compress.blocks`): the same bits, with no whole decoded copy beside the
    incoming gradient and the result (a whole-graph layer's output: one `[nodes, dim]` less at
    the backward's peak)."""
    rows, width = grad.shape
    row_bytes = 3 * width * grad.element_size()  # a block's decoded rows, product and result
    budget = device_budget(None, grad.device, rows * row_bytes)
    blocks = list(spans(rows, row_bytes, budget))
    if len(blocks) == 1:
        return _backward(grad, stored.decode().reshape(rows, width), norm, 1, eps)
    grad_x = torch.empty_like(grad)
    for a, b in blocks:
        out = stored.rows(a, b)
        _backward(grad[a:b], out, norm[a:b], 1, eps, result=grad_x[a:b])
    return grad_x


def offer_normalized(x: torch.Tensor, eps: float = 1e-12, *, config: CompressionConfig) -> None:
    """Have the ops that save `x [rows, dim]` later in the step store it as `l2_normalize(x)`
    would have (its output at `normalize_bits` and the norms: `codec.offer_rescaled`), when only
    some rows of x are normalized with gradient (`l2_normalize(x[batch])`: a KGAT step's rows).
    The normalization's own save and its whole-graph backward are then gone, and the next layer
    stores x exactly as before. Nothing without gradient or compression."""
    if not config.enabled or not torch.is_grad_enabled():
        return
    normalized = config.for_normalized()
    with torch.no_grad():
        norm = x.norm(p=2, dim=-1, keepdim=True)
        stored = compress(x / norm.clamp_min(eps), normalized)  # L2Normalize's arithmetic
    offer_rescaled(x, stored, norm, eps, normalized)


def l2_normalize(
    x: torch.Tensor, dim: int = -1, eps: float = 1e-12, *, config: CompressionConfig
) -> torch.Tensor:
    """`F.normalize(x, p=2, dim=dim, eps=eps)`; with `config.bits < 32` the output is saved compressed
    (per `config.for_normalized()`); without gradient (scoring) nothing is saved or compressed."""
    if not config.enabled or not torch.is_grad_enabled():
        return F.normalize(x, p=2.0, dim=dim, eps=eps)
    return apply_compressed(L2Normalize, x, dim, eps, config)
