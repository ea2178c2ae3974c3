"""How a tensor is cut into groups and how a group's codes are packed into bytes.

Every backend follows this one layout, so codes written by one are read by the other:

- the tensor is flattened (row-major) and cut into groups of `group_len` consecutive elements; the
  last group may be short (only when `group_size` does not divide `numel`);
- group `r` stores `bytes_per_group = ceil(group_len / per_byte)` bytes, `per_byte = 8 // bits`;
- element `c` of a group sits in byte `c // per_byte` at bit offset `(c % per_byte) * bits`
  (first element in the low bits); padding codes are 0.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

BIT_WIDTHS = (1, 2, 4, 8)


@dataclass(frozen=True)
class GroupLayout:
    """The group and byte geometry of one quantized tensor (derived, never stored)."""

    numel: int
    group_len: int
    bits: int

    @classmethod
    def for_shape(cls, shape: tuple[int, ...], group_size: int | None, bits: int) -> GroupLayout:
        """Groups are rows of the last dim (`group_size=None`, a 0-d tensor is one row) or blocks."""
        return _layout_for_shape(cls, tuple(shape), group_size, bits)

    @functools.cached_property
    def n_groups(self) -> int:
        return -(-self.numel // self.group_len)

    @property
    def per_byte(self) -> int:
        return 8 // self.bits

    @functools.cached_property
    def bytes_per_group(self) -> int:
        return -(-self.group_len // self.per_byte)

    @property
    def padded_len(self) -> int:
        """Codes per group once padded to whole bytes."""
        return self.bytes_per_group * self.per_byte

    @property
    def max_code(self) -> int:
        return (1 << self.bits) - 1


@functools.lru_cache(maxsize=1024)
def _layout_for_shape(
    cls: type[GroupLayout], shape: tuple[int, ...], group_size: int | None, bits: int
) -> GroupLayout:
    """`GroupLayout.for_shape`, one instance per (shape, group size, bits): every quantized tensor
    asks for its layout several times (checks, backends, `QuantizedTensor.layout`), and the cached
    `n_groups` and `bytes_per_group` then come with it. (The layout is a value: equal arguments
    give an equal layout, so sharing one changes nothing.)"""
    numel = math.prod(shape)
    row_len = shape[-1] if shape else 1
    group_len = row_len if group_size is None else group_size
    return cls(numel=numel, group_len=max(group_len, 1), bits=bits)


def pack_codes(codes: torch.Tensor, layout: GroupLayout) -> torch.Tensor:
    """`[n_groups, group_len]` uint8 codes (each < 2**bits) -> `[n_groups, bytes_per_group]` uint8."""
    pad = layout.padded_len - layout.group_len
    if pad:
        codes = torch.nn.functional.pad(codes, (0, pad))
    if layout.per_byte == 1:
        return codes.contiguous()
    fields = codes.view(layout.n_groups, layout.bytes_per_group, layout.per_byte)
    packed = fields[..., 0].clone()
    for k in range(1, layout.per_byte):
        packed |= fields[..., k] << (k * layout.bits)
    return packed


def unpack_codes(packed: torch.Tensor, layout: GroupLayout) -> torch.Tensor:
    """`[n_groups, bytes_per_group]` uint8 -> `[n_groups, group_len]` uint8 codes."""
    if layout.per_byte == 1:
        return packed
    shifts = torch.arange(0, 8, layout.bits, dtype=torch.uint8, device=packed.device)
    fields = (packed.unsqueeze(-1) >> shifts) & layout.max_code
    return fields.view(layout.n_groups, layout.padded_len)[:, : layout.group_len]
