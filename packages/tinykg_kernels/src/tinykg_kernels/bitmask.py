"""1-bit packed boolean masks: `pack_bits` / `unpack_bits` (ReLU signs, dropout keeps).

A bool tensor costs one byte per element in torch; packed, eight elements share a byte: the mask is
flattened (row-major) and element `i` sits in byte `i // 8` at bit `i % 8`, least significant bit
first (the layout of 1-bit codes in `packing.py`). Like `quantize`, the backend is chosen per call:
`auto` packs CPU masks of 4,096+ elements in inductor's loops (`cpu_ops`; there are no native ones,
so `cpu-native` steps down to them) and everything else with the torch ops below (which run on any
device). `usage` records which ran.
"""

from __future__ import annotations

import functools
import math

import torch

from tinykg_kernels import dispatch, usage

_BIT_WEIGHTS = (1, 2, 4, 8, 16, 32, 64, 128)


@functools.cache
def _weights(device: torch.device) -> torch.Tensor:
    """The bit weights on `device`, built once (a fresh tensor per mask is a host-to-device copy on
    CUDA, as `reference.normal_tables` avoids for the level tables)."""
    return torch.tensor(_BIT_WEIGHTS, dtype=torch.uint8, device=device)


def pack_bits_eagerly(flat: torch.Tensor) -> torch.Tensor:
    """The torch path of `pack_bits` for a flat bool tensor."""
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    groups = flat.view(-1, 8).to(torch.uint8)
    return (groups * _weights(flat.device)).sum(dim=1, dtype=torch.uint8)


def unpack_bits_eagerly(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """The torch path of `unpack_bits`: a flat bool tensor of `numel` elements."""
    bits = packed.unsqueeze(1).bitwise_and(_weights(packed.device)).ne(0)
    return bits.reshape(-1)[:numel]


def pack_bits(mask: torch.Tensor, backend: str | None = None) -> torch.Tensor:
    """`mask` (bool, any shape) flattened and packed: uint8 `[ceil(numel / 8)]`."""
    if mask.dtype != torch.bool:
        raise TypeError(f"pack_bits expects a bool tensor (got {mask.dtype}); e.g. pass x > 0")
    flat = mask.reshape(-1)
    if dispatch.select_backend(mask.device, backend, flat.numel()) in dispatch.CPU_BACKENDS:
        return dispatch.cpu_ops().pack_bits(flat)
    usage.record("pack_bits", "torch")
    return pack_bits_eagerly(flat)


def unpack_bits(
    packed: torch.Tensor,
    shape: torch.Size | tuple[int, ...],
    backend: str | None = None,
    dtype: torch.dtype = torch.bool,
) -> torch.Tensor:
    """The bool tensor of `shape` that `pack_bits` packed into `packed`; with a float `dtype`, the
    mask as 1 and 0 in that dtype (what a backward multiplies by), made in one pass by the CPU
    loops rather than a bool tensor and then a conversion."""
    numel = math.prod(shape)
    if packed.numel() != -(-numel // 8):
        raise ValueError(
            f"{packed.numel()} packed bytes cannot hold a mask of shape {tuple(shape)} "
            f"({-(-numel // 8)} bytes); pass the shape the mask had when it was packed"
        )
    if dispatch.select_backend(packed.device, backend, numel) in dispatch.CPU_BACKENDS:
        flat = dispatch.cpu_ops().unpack_bits(packed, numel, dtype)
    else:
        usage.record("unpack_bits", "torch")
        flat = unpack_bits_eagerly(packed, numel).to(dtype)
    return flat.reshape(shape)
