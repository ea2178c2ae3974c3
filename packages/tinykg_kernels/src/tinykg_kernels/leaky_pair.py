"""`leaky_relu_pair`: LeakyReLU(a) + LeakyReLU(b) and the sign masks of a and b at one bit, in one pass.

KGAT's bi-interaction aggregator ends in `LeakyReLU(W1 (e + n)) + LeakyReLU(W2 (e * n))`, and its
backward needs only where each of the two pre-activations was positive. Op by op, on two
whole-graph tensors, that is nine passes (two LeakyReLUs, their sum and, per mask, a comparison, a
bool conversion and the packing). Here one fused loop writes the sum and both packed masks, and
`leaky_relu_pair_backward` turns the incoming gradient and the two masks into both
pre-activation gradients in one more.

The masks use the *plane* layout, so packing reads memory contiguously: a mask of n elements takes
k = ceil(n / 8) bytes, element i in byte i % k at bit i // k (the flattened mask cut into eight
consecutive planes of k elements, plane j in bit j, the last plane zero-padded). `pack_bits`'s
layout (eight consecutive elements per byte) would need strided loads.

The values are torch's, bit for bit: the sum is `F.leaky_relu(a, s) + F.leaky_relu(b, s)`; a mask
bit is `x > 0` (NaN counts as not positive, as in torch's LeakyReLU backward); the gradients are
`aten.leaky_relu_backward`'s, `grad` where x > 0 and `grad * s` elsewhere. Backends as for
`quantize`: the `compiled` CPU loops for float32 CPU tensors of 4,096+ elements whose count is a
multiple of 8, the same torch ops (padded to whole planes) on every other tensor and device.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from tinykg_kernels import dispatch

PLANES = 8  # one per bit of a byte


def mask_bytes(numel: int) -> int:
    """Bytes of a plane-packed mask of `numel` elements."""
    return -(-numel // PLANES)


def _pack_planes(mask: torch.Tensor) -> torch.Tensor:
    """bool `[8, k]` -> uint8 `[k]`, plane j in bit j."""
    packed = mask[0].to(torch.int32)
    for plane in range(1, PLANES):
        packed = packed | (mask[plane].to(torch.int32) << plane)
    return packed.to(torch.uint8)


def _unpack_planes(packed: torch.Tensor) -> torch.Tensor:
    """uint8 `[k]` -> bool `[8, k]`."""
    shifts = torch.arange(PLANES, dtype=torch.int32, device=packed.device).view(PLANES, 1)
    return ((packed.to(torch.int32).unsqueeze(0) >> shifts) & 1).to(torch.bool)


def _as_planes(x: torch.Tensor) -> torch.Tensor:
    """`x` flattened (zero-padded to whole planes) as `[8, k]`."""
    flat = x.reshape(-1)
    pad = (-flat.numel()) % PLANES
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    return flat.view(PLANES, -1)


def _from_planes(planes: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    return planes.reshape(-1)[: math.prod(shape)].view(shape)


@functools.cache
def _pair_body(slope: float):
    def pair(a: torch.Tensor, b: torch.Tensor):  # [8, k] each
        out = F.leaky_relu(a, slope) + F.leaky_relu(b, slope)
        return out, _pack_planes(a > 0), _pack_planes(b > 0)

    return pair


@functools.cache
def _pair_backward_body(slope: float):
    def pair_backward(grad: torch.Tensor, mask_a: torch.Tensor, mask_b: torch.Tensor):
        scaled = grad * slope
        return (
            torch.where(_unpack_planes(mask_a), grad, scaled),
            torch.where(_unpack_planes(mask_b), grad, scaled),
        )

    return pair_backward


def _compiled_for(x: torch.Tensor, backend: str | None) -> bool:
    """Whether this call runs the compiled loops (else the same torch ops)."""
    return (
        dispatch.select_backend(x.device, backend, x.numel()) == "compiled"
        and x.dtype == torch.float32
        and x.numel() % PLANES == 0
    )


def pack_planes(mask: torch.Tensor) -> torch.Tensor:
    """A bool mask (any shape) plane-packed: uint8 `[ceil(numel / 8)]`."""
    if mask.dtype != torch.bool:
        raise TypeError(f"pack_planes expects a bool tensor (got {mask.dtype}); e.g. pass x > 0")
    return _pack_planes(_as_planes(mask))


def unpack_planes(
    packed: torch.Tensor, shape: torch.Size | tuple[int, ...], dtype: torch.dtype = torch.bool
) -> torch.Tensor:
    """The mask of `shape` that `pack_planes` (or `leaky_relu_pair`) packed into `packed`; with a
    float `dtype`, as 1 and 0."""
    numel = math.prod(shape)
    if packed.dtype != torch.uint8 or packed.numel() != mask_bytes(numel):
        raise ValueError(
            f"a plane-packed mask of shape {tuple(shape)} is {mask_bytes(numel)} uint8 bytes "
            f"(got {packed.numel()} {packed.dtype}); pass the shape the mask had when it was packed"
        )
    return _from_planes(_unpack_planes(packed), torch.Size(shape)).to(dtype)


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
    slope = float(negative_slope)
    with torch.no_grad():
        if _compiled_for(a, backend):
            k = a.numel() // PLANES
            out, mask_a, mask_b = dispatch.compiled_ops().run_compiled(
                _pair_body, (slope,), a.reshape(PLANES, k), b.reshape(PLANES, k), dynamic=(1, 1)
            )
            return out.view(a.shape), mask_a, mask_b
        out, mask_a, mask_b = _pair_body(slope)(_as_planes(a), _as_planes(b))
        return _from_planes(out, a.shape), mask_a, mask_b


def leaky_relu_pair_backward(
    grad: torch.Tensor,
    mask_a: torch.Tensor,
    mask_b: torch.Tensor,
    negative_slope: float = 0.01,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of `a` and `b` through `leaky_relu_pair`, from its masks:
    `grad` where the input was positive, `grad * negative_slope` elsewhere."""
    expected = mask_bytes(grad.numel())
    for name, mask in (("mask_a", mask_a), ("mask_b", mask_b)):
        if mask.dtype != torch.uint8 or mask.numel() != expected:
            raise ValueError(
                f"{name} must be the {expected} uint8 bytes leaky_relu_pair packed for a tensor of "
                f"shape {tuple(grad.shape)} (got {mask.numel()} {mask.dtype})"
            )
    slope = float(negative_slope)
    with torch.no_grad():
        if _compiled_for(grad, backend):
            grad_a, grad_b = dispatch.compiled_ops().run_compiled(
                _pair_backward_body,
                (slope,),
                grad.reshape(PLANES, -1),
                mask_a,
                mask_b,
                dynamic=(1, 0, 0),
            )
            return grad_a.view(grad.shape), grad_b.view(grad.shape)
        grad_a, grad_b = _pair_backward_body(slope)(_as_planes(grad), mask_a, mask_b)
        return _from_planes(grad_a, grad.shape), _from_planes(grad_b, grad.shape)
