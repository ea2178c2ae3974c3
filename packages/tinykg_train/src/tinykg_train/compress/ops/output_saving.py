"""`tanh` and `softmax`: activations whose gradient reads their output, saving it compressed.

torch's own save the output as it is; inside `compress_saved_tensors` the hooks quantize it. These
save `compress(output, config)` themselves, so a model whose every save goes through
`tinykg_train.compress.ops` (`Recommender.saves_through_ops`) can train without the hooks' Python on
every saved tensor. The forward and the gradient formulas are torch's (`tanh_backward`,
`_softmax_backward_data`), bit for bit on an uncompressed output.
"""

from __future__ import annotations

from typing import Any

import torch

from tinykg_train.compress.codec import compress
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.saving import apply_compressed, load, save


class CompressedTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, config: CompressionConfig) -> torch.Tensor:
        out = torch.tanh(x)
        save(ctx, compress(out, config))
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (out,) = load(ctx)
        return torch.ops.aten.tanh_backward(grad, out), None


class CompressedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, config: CompressionConfig) -> torch.Tensor:
        out = torch.softmax(x, dim=dim)
        save(ctx, compress(out, config))
        ctx.dim = dim
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (out,) = load(ctx)
        return torch._softmax_backward_data(grad, out, ctx.dim, out.dtype), None, None


def tanh(x: torch.Tensor, *, config: CompressionConfig) -> torch.Tensor:
    """`torch.tanh(x)`; with `config.bits < 32` the output is saved compressed."""
    if not config.enabled:
        return torch.tanh(x)
    return apply_compressed(CompressedTanh, x, config)


def softmax(x: torch.Tensor, dim: int, *, config: CompressionConfig) -> torch.Tensor:
    """`torch.softmax(x, dim)`; with `config.bits < 32` the output is saved compressed."""
    if not config.enabled:
        return torch.softmax(x, dim=dim)
    return apply_compressed(CompressedSoftmax, x, dim % max(x.dim(), 1), config)
