"""`mul`: element-wise product of two activations (KGAT's bi-interaction e_h * e_N); `score_margin`:
a BPR margin `<u, pos> - <u, neg>` per row; `sum_of_squares` (an L2 penalty's).

Each factor is needed for the other's gradient: with `config.bits < 32` both are saved compressed
(and only the one whose partner needs a gradient). Broadcasting is supported by `mul`: gradients are
summed back to each factor's shape.
"""

from __future__ import annotations

from typing import Any

import torch

from tinykg_train.compress.codec import compress
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.gathered import gathered_rows
from tinykg_train.compress.saving import apply_compressed, load, save


class CompressedMul(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, a: torch.Tensor, b: torch.Tensor, config: CompressionConfig
    ) -> torch.Tensor:
        a_needs, b_needs = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        save(
            ctx, compress(a, config) if b_needs else None, compress(b, config) if a_needs else None
        )
        ctx.shapes = (a.shape, b.shape)
        return a * b

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        a, b = load(ctx)
        a_shape, b_shape = ctx.shapes
        grad_a = (grad * b).sum_to_size(a_shape) if ctx.needs_input_grad[0] else None
        grad_b = (grad * a).sum_to_size(b_shape) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b, None


class CompressedSumOfSquares(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, config: CompressionConfig) -> torch.Tensor:
        save(ctx, compress(x, config))
        return x.pow(2).sum()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (x,) = load(ctx)
        return grad * (2.0 * x), None  # torch's pow backward (exponent 2) of the expanded sum


def sum_of_squares(x: torch.Tensor, *, config: CompressionConfig) -> torch.Tensor:
    """`x.pow(2).sum()`; with `config.bits < 32` `x` is saved compressed (rows gathered from a
    parameter, as an L2 penalty's are, as their indices: exactly)."""
    if not config.enabled:
        return x.pow(2).sum()
    return apply_compressed(CompressedSumOfSquares, x, config)


def mul(a: torch.Tensor, b: torch.Tensor, *, config: CompressionConfig) -> torch.Tensor:
    """`a * b`; with `config.bits < 32` both factors are saved compressed."""
    if not config.enabled:
        return a * b
    return apply_compressed(CompressedMul, a, b, config)


class CompressedScoreMargin(torch.autograd.Function):
    """`<u, pos> - <u, neg>` per row, computed as the two dot products (the plain op's bits), saving
    `u` and `pos - neg` compressed: the gradients are `g (pos - neg)` for `u` and `+-g u` for the
    items, so two saved factors serve all three where two `mul`s save three (`u`, `pos`, `neg`).
    Item rows that are both rows of a parameter are saved as such (their indices, exact)."""

    @staticmethod
    def forward(
        ctx: Any, u: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, config: CompressionConfig
    ) -> torch.Tensor:
        u_needs, items_need = ctx.needs_input_grad[0], any(ctx.needs_input_grad[1:3])
        items = _saved_items(pos, neg, config) if u_needs else (None, None)
        save(ctx, compress(u, config) if items_need else None, *items)
        return (u * pos).sum(dim=-1) - (u * neg).sum(dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        u, pos_or_difference, neg = load(ctx)
        grad = grad.unsqueeze(-1)
        grad_u = None
        if ctx.needs_input_grad[0]:  # with exact rows, the plain op's `g pos - g neg` bit for bit
            grad_u = grad * pos_or_difference
            grad_u = grad_u if neg is None else grad_u - grad * neg
        grad_pos = grad * u if ctx.needs_input_grad[1] else None
        grad_neg = -(grad * u) if ctx.needs_input_grad[2] else None
        return grad_u, grad_pos, grad_neg, None


def _saved_items(pos: torch.Tensor, neg: torch.Tensor, config: CompressionConfig) -> tuple:
    """What `u`'s gradient reads: `(pos, neg)` as their indices when both are rows of a parameter
    (exact, and no wider than one compressed copy), else `(pos - neg compressed, None)`."""
    pos_rows, neg_rows = gathered_rows(pos), gathered_rows(neg)
    if pos_rows is not None and neg_rows is not None:
        return pos_rows, neg_rows  # what `compress` stores for such rows
    return compress(pos - neg, config), None


def score_margin(
    u: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, *, config: CompressionConfig
) -> torch.Tensor:
    """`(u * pos).sum(-1) - (u * neg).sum(-1)` for `[batch, dim]` rows; with `config.bits < 32`
    `u` and `pos - neg` are saved compressed (half the codec work and bytes of two `mul`s)."""
    if not config.enabled:
        return (u * pos).sum(dim=-1) - (u * neg).sum(dim=-1)
    if not u.shape == pos.shape == neg.shape:
        raise ValueError(
            f"score_margin needs three rows of one shape (got {tuple(u.shape)}, "
            f"{tuple(pos.shape)}, {tuple(neg.shape)})"
        )
    return apply_compressed(CompressedScoreMargin, u, pos, neg, config)
