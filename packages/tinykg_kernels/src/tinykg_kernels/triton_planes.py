# ruff: noqa: SIM108  (constexpr branches inside kernels read better as if-statements)
"""Triton kernels for the plane-layout masks (`planes.py`): `leaky_relu_pair`, its backward (whole
or a block of elements) and dropout's multiply and backward, each one launch on a GPU.

Eagerly, on a GPU, each of these is a dozen or more small kernels (the LeakyReLUs, comparisons,
conversions, shifts and a sum per mask; an unpack of each mask in backward), and a whole-graph
step runs them per layer, so their launches, not their bytes, cost the time (an H200 spent 27 ms of
host time on a KGAT INT2 CF step of lfm1m whose kernels took 2.3 ms). Here a program owns `BLOCK`
mask bytes and the eight elements of each (element i sits in byte i % k at bit i // k, k =
ceil(numel / 8)): it reads and writes the values of all eight planes and the bytes once.

The values are the eager ops' bit for bit, float32 only (other dtypes take the torch ops): the same
IEEE operations in the same order, no FMA contraction (launches pass `enable_fp_fusion=False`):
`where(x > 0, x, x * slope)` is torch's LeakyReLU and its backward, `x * (noise * scale)` and
`grad * (bit * kept_value)` dropout's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tinykg_kernels.triton_ops import INTERPRETED, Launch

# Mask bytes (forward) or elements (backward) per program: the interpreter's cost grows with the
# number of programs, so it gets big blocks.
BLOCK = 1 << 14 if INTERPRETED else 1024


# fmt: off
@triton.jit
def _program_bytes(k, BLOCK: tl.constexpr):
    """This program's mask bytes (int64) and which of them exist."""
    byte = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    return byte, byte < k


@triton.jit
def _plane_elements(byte, byte_ok, plane, k, numel):
    """The elements of plane `plane` that `byte` holds, and which of them exist (int64: past 2**31
    elements `plane * k` would overflow an int32)."""
    index = byte + tl.cast(k, tl.int64) * plane
    return index, byte_ok & (index < numel)


@triton.jit
def _leaky_pair_kernel(a_ptr, b_ptr, out_ptr, mask_a_ptr, mask_b_ptr, numel, k, slope,
                       BLOCK: tl.constexpr):
    byte, byte_ok = _program_bytes(k, BLOCK)
    bits_a = tl.zeros((BLOCK,), tl.int32)
    bits_b = tl.zeros((BLOCK,), tl.int32)
    for plane in tl.static_range(8):
        index, ok = _plane_elements(byte, byte_ok, plane, k, numel)
        a = tl.load(a_ptr + index, mask=ok, other=0.0)
        b = tl.load(b_ptr + index, mask=ok, other=0.0)
        a_positive = a > 0
        b_positive = b > 0
        out = tl.where(a_positive, a, a * slope) + tl.where(b_positive, b, b * slope)
        tl.store(out_ptr + index, out, mask=ok)
        bits_a = bits_a | (a_positive.to(tl.int32) << plane)
        bits_b = bits_b | (b_positive.to(tl.int32) << plane)
    tl.store(mask_a_ptr + byte, bits_a.to(tl.uint8), mask=byte_ok)
    tl.store(mask_b_ptr + byte, bits_b.to(tl.uint8), mask=byte_ok)


@triton.jit
def _mask_bit(mask_ptr, element, k, ok):
    """Bit `element` of a plane-packed mask of k bytes, as 0 or 1 (int32)."""
    byte = tl.load(mask_ptr + element % k, mask=ok, other=0).to(tl.int32)
    return (byte >> (element // k).to(tl.int32)) & 1


@triton.jit
def _leaky_pair_backward_kernel(grad_ptr, mask_a_ptr, mask_b_ptr, grad_a_ptr, grad_b_ptr, count,
                                start, k, slope, WANT_A: tl.constexpr, WANT_B: tl.constexpr,
                                BLOCK: tl.constexpr):
    offset = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offset < count
    element = start + offset
    grad = tl.load(grad_ptr + offset, mask=ok, other=0.0)
    scaled = grad * slope
    if WANT_A:
        bit = _mask_bit(mask_a_ptr, element, k, ok)
        tl.store(grad_a_ptr + offset, tl.where(bit != 0, grad, scaled), mask=ok)
    if WANT_B:
        bit = _mask_bit(mask_b_ptr, element, k, ok)
        tl.store(grad_b_ptr + offset, tl.where(bit != 0, grad, scaled), mask=ok)


@triton.jit
def _dropout_kernel(x_ptr, noise_ptr, out_ptr, kept_ptr, numel, k, scale,
                    SCALED: tl.constexpr, BLOCK: tl.constexpr):
    byte, byte_ok = _program_bytes(k, BLOCK)
    bits = tl.zeros((BLOCK,), tl.int32)
    for plane in tl.static_range(8):
        index, ok = _plane_elements(byte, byte_ok, plane, k, numel)
        x = tl.load(x_ptr + index, mask=ok, other=0.0)
        noise = tl.load(noise_ptr + index, mask=ok, other=0.0)
        if SCALED:
            out = x * (noise * scale)
        else:
            out = x * noise
        tl.store(out_ptr + index, out, mask=ok)
        bits = bits | ((noise != 0).to(tl.int32) << plane)
    tl.store(kept_ptr + byte, bits.to(tl.uint8), mask=byte_ok)


@triton.jit
def _dropout_backward_kernel(grad_ptr, kept_ptr, out_ptr, numel, k, kept_value,
                             BLOCK: tl.constexpr):
    element = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = element < numel
    grad = tl.load(grad_ptr + element, mask=ok, other=0.0)
    noise = _mask_bit(kept_ptr, element, k, ok).to(tl.float32) * kept_value
    tl.store(out_ptr + element, grad * noise, mask=ok)
# fmt: on


def _grid(count: int) -> tuple[int]:
    return (max(-(-count // BLOCK), 1),)


def _mask_like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(-(-x.numel() // 8), dtype=torch.uint8, device=x.device)


def leaky_relu_pair(
    a: torch.Tensor, b: torch.Tensor, slope: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Contiguous float32 a, b of one shape: (LeakyReLU(a) + LeakyReLU(b), mask of a > 0, of b > 0)."""
    out = torch.empty_like(a)
    mask_a, mask_b = _mask_like(a), _mask_like(a)
    k = mask_a.numel()
    if k:
        args = (a, b, out, mask_a, mask_b, a.numel(), k, slope)
        Launch(_leaky_pair_kernel, _grid(k), args, {"BLOCK": BLOCK}).run()
    return out, mask_a, mask_b


def leaky_relu_pair_backward(
    grad: torch.Tensor,
    mask_a: torch.Tensor,
    mask_b: torch.Tensor,
    slope: float,
    start: int = 0,
    want: tuple[bool, bool] = (True, True),
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Contiguous float32 `grad`, elements `start:start + grad.numel()` of the tensor the masks were
    made from: the gradients of a and b (`grad` where positive, `grad * slope` elsewhere); a
    gradient `want` leaves out is None (not computed)."""
    grad_a = torch.empty_like(grad) if want[0] else None
    grad_b = torch.empty_like(grad) if want[1] else None
    count = grad.numel()
    if count:
        # a gradient left out is never written: grad stands in for its pointer
        outputs = (grad if grad_a is None else grad_a, grad if grad_b is None else grad_b)
        args = (grad, mask_a, mask_b, *outputs, count, start, mask_a.numel(), slope)
        constants = {"WANT_A": want[0], "WANT_B": want[1], "BLOCK": BLOCK}
        Launch(_leaky_pair_backward_kernel, _grid(count), args, constants).run()
    return grad_a, grad_b


def apply_dropout_noise(
    x: torch.Tensor, noise: torch.Tensor, scale: float, out: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Contiguous float32 x and noise: (`x * (noise * scale)`, or `x * noise` at scale 1, and the
    mask of noise != 0); the product written into `out` when given (`noise` itself is fine: a
    program loads its elements before it stores them)."""
    out = torch.empty_like(x) if out is None else out
    kept = _mask_like(x)
    k = kept.numel()
    if k:
        args = (x, noise, out, kept, x.numel(), k, scale)
        Launch(_dropout_kernel, _grid(k), args, {"SCALED": scale != 1, "BLOCK": BLOCK}).run()
    return out, kept


def dropout_noise_backward(
    grad: torch.Tensor, kept: torch.Tensor, kept_value: float
) -> torch.Tensor:
    """Contiguous float32 grad: `grad * noise`, the noise `kept_value` where `kept`, else 0."""
    out = torch.empty_like(grad)
    if grad.numel():
        args = (grad, kept, out, grad.numel(), kept.numel(), kept_value)
        Launch(_dropout_backward_kernel, _grid(grad.numel()), args, {"BLOCK": BLOCK}).run()
    return out
