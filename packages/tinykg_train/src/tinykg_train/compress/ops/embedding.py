"""`embedding`: rows of a weight table; saves only the indices (narrowest integer dtype).

The gradient is a dense tensor of the weight's shape built with one index_add (no sparse gradient).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.ops.indices import check_index, compact_index, widen_index
from tinykg_train.compress.saving import apply_compressed, load, save


class Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        save(ctx, compact_index(index, weight.shape[0]))
        ctx.weight_shape = weight.shape
        return F.embedding(index, weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (index,) = load(ctx)
        index = widen_index(index)
        flat = grad.reshape(-1, *ctx.weight_shape[1:])
        return grad.new_zeros(ctx.weight_shape).index_add_(0, index.reshape(-1), flat), None


def embedding(
    weight: torch.Tensor, index: torch.Tensor, *, config: CompressionConfig
) -> torch.Tensor:
    """`F.embedding(index, weight)`: rows `index` (any shape) of `weight` [num, ...]."""
    check_index("index", index)
    if not config.enabled:
        return F.embedding(index, weight)
    return apply_compressed(Embedding, weight, index)
