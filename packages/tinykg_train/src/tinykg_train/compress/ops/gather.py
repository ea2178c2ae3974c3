"""`gather`: `torch.gather` that saves only its index, not the tensor it reads from.

Its gradient scatters the incoming gradient back by the index into zeros of the input's shape:
the input's values are never read. torch's own gather saves the whole input anyway, so inside a
`compress_saved_tensors` block a step quantized it and dequantized it again only for its shape
(KGCN's relation scores, `[2 * batch, relations]`, every step). The forward and the gradient are
torch's, bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch

from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.ops.indices import check_index, compact_index, widen_index
from tinykg_train.compress.saving import apply_compressed, load, save


class IndexOnlyGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, values: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
        save(ctx, compact_index(index, values.shape[dim]))
        ctx.shape, ctx.dim = values.shape, dim
        return torch.gather(values, dim, index)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (index,) = load(ctx)
        grad_values = grad.new_zeros(ctx.shape).scatter_add_(ctx.dim, widen_index(index), grad)
        return grad_values, None, None


def gather(
    values: torch.Tensor, dim: int, index: torch.Tensor, *, config: CompressionConfig
) -> torch.Tensor:
    """`torch.gather(values, dim, index)`; with `config.bits < 32` only the index is saved."""
    check_index("index", index)
    if not config.enabled:
        return torch.gather(values, dim, index)
    return apply_compressed(IndexOnlyGather, values, dim % max(values.dim(), 1), index)
