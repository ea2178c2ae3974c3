"""`squared_distance`: ||a + b - c||^2 per row (TransR's plausibility score), saving its inputs.

Plain ops would save the difference a + b - c: one more [rows, dim] activation to store per score,
though TransR's loss already saves its inputs (the projected heads and tails for its L2 penalty;
the relation rows are parameter rows, stored as indices). This Function saves a, b and c
(compressed; a tensor compressed once in a step is shared, see `codec.compress`) and rebuilds the
difference in backward: the gradient, 2 (a + b - c) g, is linear in them, so it stays unbiased.
"""

from __future__ import annotations

from typing import Any

import torch

from tinykg_train.compress.codec import compress
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.saving import apply_compressed, load, save


def _plain(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return (a + b - c).pow(2).sum(-1)


class SquaredDistance(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a, b, c, config: CompressionConfig) -> torch.Tensor:
        save(ctx, *(compress(t, config) for t in (a, b, c)))
        ctx.shapes = (a.shape, b.shape, c.shape)
        return _plain(a, b, c)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        a, b, c = load(ctx)
        grad_difference = (a + b - c).mul_(grad.unsqueeze(-1) * 2)  # d/d(a + b - c)
        a_shape, b_shape, c_shape = ctx.shapes
        needs = ctx.needs_input_grad
        return (
            grad_difference.sum_to_size(a_shape) if needs[0] else None,
            grad_difference.sum_to_size(b_shape) if needs[1] else None,
            grad_difference.neg().sum_to_size(c_shape) if needs[2] else None,
            None,
        )


def squared_distance(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, config: CompressionConfig
) -> torch.Tensor:
    """`(a + b - c).pow(2).sum(-1)` (broadcasting); with `config.bits < 32` the inputs are saved
    compressed instead of their difference."""
    if not config.enabled:
        return _plain(a, b, c)
    return apply_compressed(SquaredDistance, a, b, c, config)
