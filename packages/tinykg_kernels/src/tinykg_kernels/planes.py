"""The *plane* layout of 1-bit masks, for fused kernels that write or read a mask in the same pass as
their values (`leaky_pair`, `dropout`).

A mask of n elements takes k = ceil(n / 8) bytes: element i sits in byte i % k at bit i // k (the
flattened mask cut into eight consecutive planes of k elements, plane j in bit j, the last plane
zero-padded). Packing then reads eight contiguous streams, which a compiled loop vectorizes;
`pack_bits`'s layout (eight consecutive elements per byte) would need strided loads. The helpers
here are plain torch ops: the fused bodies are traced from them (`cpu-inductor`), and they run
eagerly on any device (`torch`); `path` says which of those, the native loops or the Triton
kernels of a GPU (`triton_planes`) a call takes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from tinykg_kernels import dispatch, native, usage

PLANES = 8  # one per bit of a byte


def mask_bytes(numel: int) -> int:
    """Bytes of a plane-packed mask of `numel` elements."""
    return -(-numel // PLANES)


def _shifts(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(PLANES, dtype=dtype, device=device).view(PLANES, 1)


def pack(mask: torch.Tensor, *, unrolled: bool = False) -> torch.Tensor:
    """bool `[8, k]` -> uint8 `[k]`, plane j in bit j. `unrolled`: a float sum of `plane * 2**j`
    (exact below 256), the form a compiled loop runs fastest (integer shifts and ORs of the bools
    take a slower vector-mask path); otherwise three whole-tensor ops (few kernel launches, for the
    eager path on any device). The same bytes either way."""
    if unrolled:
        packed = mask[0].to(torch.float32)
        for plane in range(1, PLANES):
            packed = packed + mask[plane].to(torch.float32) * float(1 << plane)
        return packed.to(torch.uint8)
    bits = mask.to(torch.uint8) << _shifts(mask.device, torch.uint8)
    return bits.sum(dim=0, dtype=torch.uint8)  # distinct bits: the sum is their OR


def unpack(packed: torch.Tensor, dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """uint8 `[k]` -> `[8, k]` of `dtype`: bool, or 1 and 0 (converted from the integer bits
    directly: through bool, a compiled loop takes a slower vector-mask path)."""
    shifts = _shifts(packed.device, torch.int32)
    return ((packed.to(torch.int32).unsqueeze(0) >> shifts) & 1).to(dtype)


def as_planes(x: torch.Tensor) -> torch.Tensor:
    """`x` flattened (zero-padded to whole planes) as `[8, k]`."""
    flat = x.reshape(-1)
    pad = (-flat.numel()) % PLANES
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    return flat.view(PLANES, -1)


def from_planes(planes: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The first `prod(shape)` elements of `[8, k]` planes, as `shape`."""
    return planes.reshape(-1)[: math.prod(shape)].view(shape)


def path(x: torch.Tensor, backend: str | None) -> str:
    """What a fused call on `x` runs: `triton` (`triton_planes`) for float32 tensors where
    `dispatch.select_backend` picks Triton (CUDA); `cpu-native` (`native.planes_applies`) or
    `cpu-inductor` for float32 CPU tensors of 4,096+ elements whose count is a whole number of
    planes; `torch` (the same ops, padded to whole planes) for everything else."""
    chosen = dispatch.select_backend(x.device, backend, x.numel())
    if chosen == "triton" and x.dtype == torch.float32:
        return "triton"
    if chosen not in dispatch.CPU_BACKENDS or x.dtype != torch.float32 or x.numel() % PLANES:
        return "torch"
    return "cpu-native" if chosen == "cpu-native" and native.planes_applies(x) else "cpu-inductor"


def run_fused(
    body_factory: Callable[..., Callable],
    key: tuple,
    values: Sequence[torch.Tensor],
    masks: Sequence[torch.Tensor] = (),
    *,
    op: str,
    loops: str,
):
    """`body_factory(*key, compiled)` on `values` as `[8, k]` planes and plane-packed `masks`
    (`[k]`): inductor's loops when `loops` (a `path`) is `cpu-inductor`, else the same body eagerly
    on zero-padded planes; recorded in `usage` under `op`. Returns what the body returns (take
    values back with `from_planes`)."""
    if loops == "cpu-inductor":
        planes = [v.reshape(PLANES, -1) for v in values]
        dynamic = (1,) * len(planes) + (0,) * len(masks)
        ops = dispatch.cpu_ops()
        result = ops.run_compiled(body_factory, (*key, True), *planes, *masks, dynamic=dynamic)
        usage.record(op, ops.inductor_or_torch())
        return result
    usage.record(op, "torch")
    return body_factory(*key, False)(*[as_planes(v) for v in values], *masks)


def check_mask(name: str, mask: torch.Tensor, shape: torch.Size | tuple[int, ...]) -> None:
    """Raise unless `mask` is the plane-packed mask of a tensor of `shape`."""
    expected = mask_bytes(math.prod(shape))
    if mask.dtype != torch.uint8 or mask.numel() != expected:
        raise ValueError(
            f"{name} must be the {expected} uint8 bytes of a plane-packed mask of shape "
            f"{tuple(shape)} (got {mask.numel()} {mask.dtype}); pass the mask made for that tensor"
        )


def pack_planes(mask: torch.Tensor) -> torch.Tensor:
    """A bool mask (any shape) plane-packed: uint8 `[ceil(numel / 8)]`."""
    if mask.dtype != torch.bool:
        raise TypeError(f"pack_planes expects a bool tensor (got {mask.dtype}); e.g. pass x > 0")
    return pack(as_planes(mask))


def plane_bits(packed: torch.Tensor, start: int, stop: int, numel: int) -> torch.Tensor:
    """Elements `start:stop` (of the flattened tensor of `numel` elements a mask was packed from)
    of the plane-packed mask `packed`, as bool `[stop - start]`: a block of rows of a whole-graph
    mask without unpacking all of it."""
    planes = mask_bytes(numel)
    check_mask("packed", packed, (numel,))
    if not 0 <= start <= stop <= numel:
        raise ValueError(f"plane_bits needs 0 <= start <= stop <= {numel} (got {start}, {stop})")
    if stop == start:
        return torch.zeros(0, dtype=torch.bool, device=packed.device)
    pieces = []
    for plane in range(start // planes, (stop - 1) // planes + 1):
        low, high = max(start, plane * planes), min(stop, (plane + 1) * planes)
        pieces.append((packed[low - plane * planes : high - plane * planes] >> plane) & 1)
    return torch.cat(pieces).to(torch.bool)


def unpack_planes(
    packed: torch.Tensor, shape: torch.Size | tuple[int, ...], dtype: torch.dtype = torch.bool
) -> torch.Tensor:
    """The mask of `shape` that `pack_planes` (or a fused kernel) packed into `packed`; with a float
    `dtype`, as 1 and 0."""
    check_mask("packed", packed, shape)
    return from_planes(unpack(packed), torch.Size(shape)).to(dtype)
