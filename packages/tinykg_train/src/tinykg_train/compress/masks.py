"""1-bit packed boolean masks (ReLU/LeakyReLU signs, dropout keeps, bool tensors autograd saves).

A bool tensor costs one byte per element in torch; packed, eight elements share a byte. Pure torch
(bit shifts on uint8), so it runs wherever the tensor lives.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_BIT_WEIGHTS = (1, 2, 4, 8, 16, 32, 64, 128)


def _weights(device: torch.device) -> torch.Tensor:
    return torch.tensor(_BIT_WEIGHTS, dtype=torch.uint8, device=device)


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """Flatten `mask` (bool) and pack it, 8 elements per uint8, least significant bit first."""
    flat = mask.reshape(-1)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    groups = flat.view(-1, 8).to(torch.uint8)
    return (groups * _weights(mask.device)).sum(dim=1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor, shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
    """The bool tensor of `shape` that `pack_bits` packed."""
    numel = 1
    for size in shape:
        numel *= size
    bits = packed.unsqueeze(1).bitwise_and(_weights(packed.device)).ne(0)
    return bits.reshape(-1)[:numel].reshape(shape)


@dataclass(frozen=True)
class PackedMask:
    """A bool tensor stored at one bit per element (`decode()` gives it back)."""

    packed: torch.Tensor
    shape: torch.Size

    @classmethod
    def pack(cls, mask: torch.Tensor) -> PackedMask:
        return cls(pack_bits(mask), mask.shape)

    def decode(self) -> torch.Tensor:
        return unpack_bits(self.packed, self.shape)

    @property
    def nbytes(self) -> int:
        return self.packed.numel()

    def parts(self) -> tuple[torch.Tensor, ...]:
        return (self.packed,)

    def meta(self) -> torch.Size:
        return self.shape

    @classmethod
    def rebuild(cls, meta: torch.Size, parts: tuple[torch.Tensor, ...]) -> PackedMask:
        return cls(parts[0], meta)
