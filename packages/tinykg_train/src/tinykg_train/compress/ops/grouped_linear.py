"""`grouped_linear`: rows in consecutive groups, each group times its own matrix (TransR's W_r).

KGAT's KG phase projects every triple's entities with the matrix of its relation. One `linear` per
relation compresses one small input per relation and step (hundreds of compress calls per epoch on
music-kgcn, each with its fixed cost); this Function saves the whole input compressed once, with
the group sizes, and runs the same per-group products in forward and backward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.ops.linear import save_linear_inputs
from tinykg_train.compress.saving import apply_compressed, load


def _per_group(x: torch.Tensor, weight: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """`x`'s group g times `weight[g]`, as `F.linear(group, weight[g].T)` (the plain op's arithmetic)."""
    return torch.cat([F.linear(rows, weight[g].T) for g, rows in enumerate(x.split(counts))])


class GroupedLinear(torch.autograd.Function):
    """Exact forward; saves the compressed input (for the weight gradient) and the weights."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        counts: list[int],
        config: CompressionConfig,
    ) -> torch.Tensor:
        save_linear_inputs(ctx, x, weight, config)
        ctx.counts = counts
        return _per_group(x, weight, counts)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = load(ctx)
        grads = grad.split(ctx.counts)
        grad_x = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.cat([g.matmul(weight[i].T) for i, g in enumerate(grads)])
        if ctx.needs_input_grad[1]:
            rows = x.split(ctx.counts)
            grad_weight = torch.stack([r.T.matmul(g) for r, g in zip(rows, grads, strict=True)])
        return grad_x, grad_weight, None, None


def grouped_linear(
    x: torch.Tensor, weight: torch.Tensor, counts: list[int], *, config: CompressionConfig
) -> torch.Tensor:
    """Rows `x[start_g : start_g + counts[g]] @ weight[g]` for consecutive groups g, concatenated.

    `x [sum(counts), in]`, `weight [G, in, out]`, `counts`: G group sizes (0 allowed); returns
    `[sum(counts), out]`. With `config.bits < 32` the input is saved compressed, once; at 32 bits,
    as it is.
    """
    if weight.dim() != 3 or len(counts) != weight.shape[0]:
        raise ValueError(
            f"'weight' needs shape [G, in, out] with G = len(counts) = {len(counts)} "
            f"(got {list(weight.shape)})"
        )
    if sum(counts) != x.shape[0]:
        raise ValueError(
            f"'counts' must add up to the {x.shape[0]} rows of 'x' (got {sum(counts)})"
        )
    # also at bits=32 (then saving x as it is): autograd's own backward of the per-group products
    # would build a zero gradient of the whole weight for every group (its `weight[g]` select)
    return apply_compressed(GroupedLinear, x, weight, counts, config)
