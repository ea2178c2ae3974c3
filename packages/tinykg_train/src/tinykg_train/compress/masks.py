"""1-bit packed boolean masks (ReLU/LeakyReLU signs, dropout keeps, bool tensors autograd saves).

A bool tensor costs one byte per element in torch; packed, eight elements share a byte. `PackedMask`
packs with `tinykg_kernels.pack_bits` (inductor's loops for large CPU masks, torch ops elsewhere);
`PlaneMask` holds the plane-layout masks a fused kernel wrote (`tinykg_kernels.planes`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tinykg_kernels import pack_bits, unpack_bits
from tinykg_kernels.planes import unpack_planes


@dataclass(frozen=True)
class _BitMask:
    """A bool tensor of `shape` stored at one bit per element in `packed`; subclasses know the
    layout (`decode`)."""

    packed: torch.Tensor
    shape: torch.Size

    @property
    def nbytes(self) -> int:
        return self.packed.numel()

    def parts(self) -> tuple[torch.Tensor, ...]:
        return (self.packed,)

    def meta(self) -> torch.Size:
        return self.shape

    @classmethod
    def rebuild(cls, meta: torch.Size, parts: tuple[torch.Tensor, ...]):
        return cls(parts[0], meta)


class PackedMask(_BitMask):
    """A bool tensor in `tinykg_kernels.pack_bits`' layout (`decode()` gives it back)."""

    @classmethod
    def pack(cls, mask: torch.Tensor) -> PackedMask:
        return cls(pack_bits(mask), mask.shape)

    @classmethod
    def positive(cls, x: torch.Tensor) -> PackedMask:
        """The mask of `x > 0` (a ReLU's sign pattern), made as `relu(x) != 0`: the same bits but
        for NaN (counted positive; the loss is NaN then anyway), and faster on the CPU, where
        torch's comparison into bool does not vectorize and a bool conversion does."""
        return cls.pack(torch.relu(x).to(torch.bool))

    def decode(self, dtype: torch.dtype = torch.bool) -> torch.Tensor:
        """The mask, or with a float `dtype` the mask as 1 and 0 (made in one pass)."""
        return unpack_bits(self.packed, self.shape, dtype=dtype)


class PlaneMask(_BitMask):
    """A bool tensor in `tinykg_kernels.planes`' layout, as the fused `leaky_relu_pair` and
    `apply_dropout_noise` return it."""

    def decode(self, dtype: torch.dtype = torch.bool) -> torch.Tensor:
        return unpack_planes(self.packed, self.shape, dtype=dtype)
