"""`embedding`: rows of a weight table; saves only the indices (narrowest integer dtype).

The gradient is a dense tensor of the weight's shape built with one index_add (no sparse gradient).
Rows of a parameter are registered as such (`gathered.remember`): an op that saves them later (a
BPR score, KGCN's neighbor mixing) stores the indices, exactly, instead of quantizing the rows.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tinykg_train.compress import stack
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.gathered import remember
from tinykg_train.compress.ops.indices import check_index, compact_index, widen_index
from tinykg_train.compress.saving import apply_compressed, load, save


class Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        compact = compact_index(index, weight.shape[0])
        save(ctx, compact)
        ctx.weight_shape = weight.shape
        rows = F.embedding(index, weight)
        if stack.is_persistent(weight):
            remember(rows, weight, compact)
        return rows

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
