"""`mul`: element-wise product of two activations (KGAT's bi-interaction e_h * e_N).

Each factor is needed for the other's gradient: with `config.bits < 32` both are saved compressed
(and only the one whose partner needs a gradient). Broadcasting is supported: gradients are summed
back to each factor's shape.
"""

from __future__ import annotations

from typing import Any

import torch

from tinykg_train.compress.codec import compress
from tinykg_train.compress.config import CompressionConfig
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


def mul(a: torch.Tensor, b: torch.Tensor, *, config: CompressionConfig) -> torch.Tensor:
    """`a * b`; with `config.bits < 32` both factors are saved compressed."""
    if not config.enabled:
        return a * b
    return apply_compressed(CompressedMul, a, b, config)
