"""`relu`, `leaky_relu`, `dropout` saving 1-bit packed masks (with `config.bits < 32`).

The backward of each needs only where the input was positive (ReLU, LeakyReLU) or which elements
were kept (dropout): one bit per element instead of the 32 of the saved activation (ReLU) or the 8 of
a bool mask (dropout). The dropout mask is exactly the forward's: the forward is the arithmetic `F.dropout`
runs on the CPU, whose noise tensor is 0 or 1 / (1 - p).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F

from tinykg_kernels import apply_dropout_noise, dropout_noise_backward
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.masks import PackedMask, PlaneMask
from tinykg_train.compress.saving import apply_compressed, load, save


class MaskedReLU(torch.autograd.Function):
    """ReLU (negative_slope 0) and LeakyReLU: grad * (1 where x > 0 else negative_slope)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, negative_slope: float) -> torch.Tensor:
        out = F.relu(x) if negative_slope == 0 else F.leaky_relu(x, negative_slope)
        save(ctx, PackedMask.positive(x))
        ctx.negative_slope = negative_slope
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (positive,) = load(ctx, decode=False)
        return through_positive_mask(grad, positive, ctx.negative_slope), None


def through_positive_mask(grad: torch.Tensor, positive: PackedMask, slope: float) -> torch.Tensor:
    """The gradient through ReLU (`slope` 0) or LeakyReLU given the packed mask of x > 0: grad
    where x > 0, else grad * slope."""
    stand_in = positive.decode(grad.dtype).view(grad.shape)  # 1 where x > 0, else 0
    if slope == 0:
        return grad * stand_in
    # torch's own LeakyReLU backward on the 1/0 stand-in for x (on the CPU 7x faster than
    # torch.where on the bool mask)
    return torch.ops.aten.leaky_relu_backward(grad, stand_in, slope, False)


@functools.cache
def _kept_value(dtype: torch.dtype, p: float) -> float:
    """The kept elements' noise value, 1 / (1 - p) as `div_` rounds it in `dtype` (once per
    (dtype, p), not per step)."""
    return torch.ones((), dtype=dtype).div_(1 - p).item()


class MaskedDropout(torch.autograd.Function):
    """`F.dropout`'s own CPU arithmetic (noise = bernoulli(1 - p) / (1 - p), out = x * noise: the same
    draws and values as the plain op), saving which elements were kept at one bit instead of the
    noise tensor: `tinykg_kernels.apply_dropout_noise` scales the draws, multiplies and packs the
    mask in one pass.
    (`torch.native_dropout` multiplies by a bool mask, an unvectorized loop on the CPU.)"""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float) -> torch.Tensor:
        draws = torch.empty_like(x).bernoulli_(1 - p)  # F.dropout's draws, not yet scaled
        ctx.kept_value = _kept_value(x.dtype, p)
        # the output over the draws: one tensor of x's size less at the peak of a whole-graph step
        out, kept = apply_dropout_noise(x, draws, scale=ctx.kept_value, out=draws)
        save(ctx, PlaneMask(kept, x.shape))
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (kept,) = load(ctx, decode=False)
        return dropout_noise_backward(grad, kept.packed, ctx.kept_value), None


def relu(x: torch.Tensor, *, config: CompressionConfig) -> torch.Tensor:
    """`F.relu(x)`; with `config.bits < 32` saves a 1-bit mask of x > 0."""
    if not config.enabled:
        return F.relu(x)
    return apply_compressed(MaskedReLU, x, 0.0)


def leaky_relu(
    x: torch.Tensor, negative_slope: float = 0.01, *, config: CompressionConfig
) -> torch.Tensor:
    """`F.leaky_relu(x, negative_slope)`; with `config.bits < 32` saves a 1-bit mask of x > 0."""
    if not config.enabled:
        return F.leaky_relu(x, negative_slope)
    return apply_compressed(MaskedReLU, x, float(negative_slope))


def dropout(
    x: torch.Tensor, p: float, training: bool, *, config: CompressionConfig
) -> torch.Tensor:
    """`F.dropout(x, p, training)`; with `config.bits < 32` saves the keep mask at 1 bit."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability 'p' needs to be in [0, 1] (got {p})")
    if not config.enabled or not training or p in (0, 1):  # p = 1: zeros, nothing to save
        return F.dropout(x, p, training)
    return apply_compressed(MaskedDropout, x, float(p))
