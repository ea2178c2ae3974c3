"""`apply_dropout_noise` / `dropout_noise_backward`: dropout's multiply with its keep mask packed at
one bit in the same pass, and the gradient from that mask.

Dropout multiplies x by a noise tensor that is 0 (dropped) or one value v = 1 / (1 - p) (kept), and
its backward multiplies the gradient by the same noise. Keeping the noise costs 32 bits per
element, a bool mask 8; packed, 1. Here one fused loop writes `x * noise` and the plane-packed mask
of `noise != 0` (`planes.py`), where the multiply, a bool conversion and a packing pass would run
op by op; the backward rebuilds the noise from the mask and multiplies in one loop. Values are
torch's bit for bit (`x * noise`, `grad * noise`). For float32 CPU tensors of 4,096+ elements (a
whole number of planes) native loops (`native/planes.cpp`, `cpu-native`), or inductor's
(`cpu-inductor`); for float32 GPU tensors one Triton kernel per call (`triton_planes`); the same
torch ops elsewhere (`planes.path`).
"""

from __future__ import annotations

import functools

import torch

from tinykg_kernels import dispatch, native, planes, usage


@functools.cache
def _apply_body(scale: float, compiled: bool = False):
    def apply(x: torch.Tensor, noise: torch.Tensor):  # [8, k] each
        if scale != 1:  # 0 or 1 draws: times the value is exactly F.dropout's noise
            return x * (noise * scale), planes.pack(noise != 0, unrolled=compiled)
        return x * noise, planes.pack(noise != 0, unrolled=compiled)

    return apply


@functools.cache
def _backward_body(kept_value: float, compiled: bool = False):  # one form either way
    def backward(grad: torch.Tensor, kept: torch.Tensor):  # grad [8, k], kept [k]
        # 1 or 0 in grad's dtype times the value: exact in every float dtype
        noise = planes.unpack(kept, grad.dtype) * kept_value
        return grad * noise

    return backward


def apply_dropout_noise(
    x: torch.Tensor,
    noise: torch.Tensor,
    backend: str | None = None,
    *,
    scale: float = 1.0,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(x * (noise * scale), pack_planes(noise != 0))` for a dropout noise tensor of x's shape and
    dtype: the scaled noise itself (`scale` 1), or the bare 0/1 draws and `scale` the kept value
    1 / (1 - p) as the noise holds it (the same values, without a pass to scale the draws).

    `out` (contiguous, x's shape and dtype; may be `noise` itself, whose draws the mask then
    keeps): where the product is written. Writing over the draws saves a whole tensor of x's size
    at the step's peak (each element is read before it is written)."""
    if x.shape != noise.shape or x.dtype != noise.dtype or not x.is_floating_point():
        raise ValueError(
            "apply_dropout_noise needs a float tensor and a noise tensor of its shape and dtype (got "
            f"{x.dtype} {tuple(x.shape)} and {noise.dtype} {tuple(noise.shape)})"
        )
    if out is not None and not (
        out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
    ):
        raise ValueError(
            f"apply_dropout_noise's 'out' needs x's shape {tuple(x.shape)} and dtype {x.dtype}, "
            f"contiguous (got {out.dtype} {tuple(out.shape)})"
        )
    with torch.no_grad():
        loops = planes.path(x, backend)
        if loops == "cpu-native":
            usage.record("dropout", loops)
            return native.dropout_apply(x, noise, float(scale), out=out)
        if loops == "triton":
            usage.record("dropout", loops)
            apply = dispatch.triton_planes().apply_dropout_noise
            return apply(x.contiguous(), noise.contiguous(), float(scale), out=out)
        product, kept = planes.run_fused(
            _apply_body, (float(scale),), (x, noise), op="dropout", loops=loops
        )
        product = planes.from_planes(product, x.shape)
    return (product if out is None else out.copy_(product)), kept


def dropout_noise_backward(
    grad: torch.Tensor, kept: torch.Tensor, kept_value: float, backend: str | None = None
) -> torch.Tensor:
    """`grad * noise`, the noise rebuilt from its packed mask `kept`: `kept_value` where kept, 0
    elsewhere (`kept_value` as the forward's noise held it, e.g. float32 1 / (1 - p))."""
    planes.check_mask("kept", kept, grad.shape)
    with torch.no_grad():
        loops = planes.path(grad, backend)
        if loops == "cpu-native":
            usage.record("dropout_backward", loops)
            return native.dropout_backward(grad, kept, float(kept_value))
        if loops == "triton":
            usage.record("dropout_backward", loops)
            backward = dispatch.triton_planes().dropout_noise_backward
            return backward(grad.contiguous(), kept, float(kept_value))
        out = planes.run_fused(
            _backward_body,
            (float(kept_value),),
            (grad,),
            (kept,),
            op="dropout_backward",
            loops=loops,
        )
    return planes.from_planes(out, grad.shape)
