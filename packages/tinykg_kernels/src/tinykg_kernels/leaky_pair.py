"""`leaky_relu_pair`: LeakyReLU(a) + LeakyReLU(b) and the sign masks of a and b at one bit, in one pass.

KGAT's bi-interaction aggregator ends in `LeakyReLU(W1 (e + n)) + LeakyReLU(W2 (e * n))`, and its
backward needs only where each of the two pre-activations was positive. Op by op, on two
whole-graph tensors, that is nine passes (two LeakyReLUs, their sum and, per mask, a comparison, a
bool conversion and the packing). Here one fused loop writes the sum and both masks (in the plane
layout, `planes.py`), and `leaky_relu_pair_backward` turns the incoming gradient and the two masks
into both pre-activation gradients in one more.

The values are torch's, bit for bit: the sum is `F.leaky_relu(a, s) + F.leaky_relu(b, s)`; a mask
bit is `x > 0` (NaN counts as not positive, as in torch's LeakyReLU backward); the gradients are
`aten.leaky_relu_backward`'s, `grad` where x > 0 and `grad * s` elsewhere. For float32 CPU tensors
of 4,096+ elements (a whole number of planes) native loops (`native/planes.cpp`, `cpu-native`), or
inductor's (`cpu-inductor`); for float32 GPU tensors one Triton kernel per call
(`triton_planes`); the same torch ops elsewhere (`planes.path`).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from tinykg_kernels import dispatch, native, planes, usage


@functools.cache
def _pair_body(slope: float, compiled: bool = False):
    def pair(a: torch.Tensor, b: torch.Tensor):  # [8, k] each
        out = F.leaky_relu(a, slope) + F.leaky_relu(b, slope)
        return out, planes.pack(a > 0, unrolled=compiled), planes.pack(b > 0, unrolled=compiled)

    return pair


@functools.cache
def _pair_backward_body(slope: float, compiled: bool = False):  # one form either way
    def factor(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """1 where the input was positive, `slope` elsewhere: `bit + (1 - bit) * slope`, exact for
        a bit of 0 or 1 (a select on the unpacked bits compiles to a slower vector-mask loop)."""
        bit = planes.unpack(mask, dtype)
        return bit + (1 - bit) * slope

    def pair_backward(grad: torch.Tensor, mask_a: torch.Tensor, mask_b: torch.Tensor):
        # grad * 1 is grad and grad * slope is torch's scaled gradient: the same bits as a select
        return grad * factor(mask_a, grad.dtype), grad * factor(mask_b, grad.dtype)

    return pair_backward


def leaky_relu_pair(
    a: torch.Tensor, b: torch.Tensor, negative_slope: float = 0.01, backend: str | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(F.leaky_relu(a, s) + F.leaky_relu(b, s), pack_planes(a > 0), pack_planes(b > 0))`, the
    masks each `ceil(numel / 8)` bytes."""
    if a.shape != b.shape or a.dtype != b.dtype or not a.is_floating_point():
        raise ValueError(
            "leaky_relu_pair needs two float tensors of one shape and dtype (got "
            f"{a.dtype} {tuple(a.shape)} and {b.dtype} {tuple(b.shape)})"
        )
    with torch.no_grad():
        loops = planes.path(a, backend)
        if loops == "cpu-native":
            usage.record("leaky_relu_pair", loops)
            return native.leaky_pair(a, b, float(negative_slope))
        if loops == "triton":
            usage.record("leaky_relu_pair", loops)
            pair = dispatch.triton_planes().leaky_relu_pair
            return pair(a.contiguous(), b.contiguous(), float(negative_slope))
        out, mask_a, mask_b = planes.run_fused(
            _pair_body, (float(negative_slope),), (a, b), op="leaky_relu_pair", loops=loops
        )
    return planes.from_planes(out, a.shape), mask_a, mask_b


def leaky_relu_pair_backward(
    grad: torch.Tensor,
    mask_a: torch.Tensor,
    mask_b: torch.Tensor,
    negative_slope: float = 0.01,
    backend: str | None = None,
    *,
    want: tuple[bool, bool] = (True, True),
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The gradients of `a` and `b` through `leaky_relu_pair`, from its masks:
    `grad` where the input was positive, `grad * negative_slope` elsewhere. A gradient `want`
    leaves out is None; the native loops and Triton then neither compute it nor make its buffer
    (the torch ops compute both and drop it)."""
    planes.check_mask("mask_a", mask_a, grad.shape)
    planes.check_mask("mask_b", mask_b, grad.shape)
    slope = float(negative_slope)
    with torch.no_grad():
        loops = planes.path(grad, backend)
        if loops == "cpu-native":
            usage.record("leaky_relu_pair_backward", loops)
            return native.leaky_pair_backward(grad, mask_a, mask_b, slope, want)
        if loops == "triton":
            usage.record("leaky_relu_pair_backward", loops)
            pair_backward = dispatch.triton_planes().leaky_relu_pair_backward
            return pair_backward(grad.contiguous(), mask_a, mask_b, slope, want=want)
        grad_a, grad_b = planes.run_fused(
            _pair_backward_body,
            (slope,),
            (grad,),
            (mask_a, mask_b),
            op="leaky_relu_pair_backward",
            loops=loops,
        )
    return tuple(
        planes.from_planes(g, grad.shape) if wanted else None
        for g, wanted in zip((grad_a, grad_b), want, strict=True)
    )


def leaky_relu_pair_backward_rows(
    grad: torch.Tensor,
    mask_a: torch.Tensor,
    mask_b: torch.Tensor,
    start: int,
    numel: int,
    negative_slope: float = 0.01,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`leaky_relu_pair_backward` for a block of a whole tensor's gradient: `grad` holds its
    elements `start:start + grad.numel()` (of `numel`), the masks are the whole tensor's. The same
    bits as the whole call's block (`grad` where positive, `grad * negative_slope` elsewhere)."""
    stop = start + grad.numel()
    planes.check_mask("mask_a", mask_a, (numel,))
    planes.check_mask("mask_b", mask_b, (numel,))
    if not 0 <= start <= stop <= numel:
        raise ValueError(f"a block of elements {start}:{stop} is outside a tensor of {numel}")
    with torch.no_grad():
        loops = planes.path(grad, backend)
        if loops == "cpu-native":
            usage.record("leaky_relu_pair_backward_rows", "cpu-native")
            grad_a, grad_b = native.leaky_pair_backward_range(
                grad, mask_a, mask_b, start, float(negative_slope)
            )
            return grad_a.view(grad.shape), grad_b.view(grad.shape)
        if loops == "triton":
            usage.record("leaky_relu_pair_backward_rows", loops)
            pair_backward = dispatch.triton_planes().leaky_relu_pair_backward
            return pair_backward(grad.contiguous(), mask_a, mask_b, float(negative_slope), start)
        flat = grad.reshape(-1)
        scaled = flat * negative_slope
        grads = []
        for mask in (mask_a, mask_b):
            positive = planes.plane_bits(mask, start, stop, numel)
            grads.append(torch.where(positive, flat, scaled).view(grad.shape))
    return grads[0], grads[1]
