"""`linear`: y = x W^T + b with the input saved compressed (optionally projected first, EXACT)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tinykg_train.compress.codec import compress
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.saving import apply_compressed, load, save


def save_linear_inputs(
    ctx: Any, x: torch.Tensor, weight: torch.Tensor, config: CompressionConfig
) -> None:
    """What a linear map's backward needs: its input (compressed, projected per `config`) for the
    weight gradient, its weight for the input gradient; each only when that gradient is wanted."""
    x_needs, weight_needs = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    save(
        ctx,
        compress(x, config, project=True) if weight_needs else None,
        weight if x_needs else None,
    )


class CompressedLinear(torch.autograd.Function):
    """Exact forward; saves the compressed input (for the weight gradient) and the weight."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        config: CompressionConfig,
    ) -> torch.Tensor:
        save_linear_inputs(ctx, x, weight, config)
        ctx.has_bias = bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = load(ctx)
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = grad.matmul(weight)
        flat_grad = grad.reshape(-1, grad.shape[-1])
        if ctx.needs_input_grad[1]:
            grad_weight = flat_grad.t().matmul(x.reshape(-1, x.shape[-1]))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = flat_grad.sum(dim=0)
        return grad_x, grad_weight, grad_bias, None


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    config: CompressionConfig,
) -> torch.Tensor:
    """`F.linear(x, weight, bias)`; with `config.bits < 32` the input is saved compressed."""
    if not config.enabled:
        return F.linear(x, weight, bias)
    return apply_compressed(CompressedLinear, x, weight, bias, config)
