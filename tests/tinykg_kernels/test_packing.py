"""Group layout and bit packing: the byte format every backend shares."""

from __future__ import annotations

import pytest
import torch

from tinykg_kernels.packing import GroupLayout, pack_codes, unpack_codes


@pytest.mark.parametrize(
    ("shape", "group_size", "bits", "expected"),
    [
        # (numel, group_len, n_groups, bytes_per_group)
        ((33, 70), None, 2, (2310, 70, 33, 18)),
        ((5, 3, 17), None, 1, (255, 17, 15, 3)),
        ((1000,), 64, 4, (1000, 64, 16, 32)),  # 15 full groups and a short one of 40
        ((7, 9), 5, 8, (63, 5, 13, 5)),
        ((), None, 2, (1, 1, 1, 1)),  # a 0-d tensor is one group of one
        ((0, 64), None, 2, (0, 64, 0, 16)),
        ((4, 0), None, 2, (0, 1, 0, 1)),
    ],
)
def test_layout_geometry(shape, group_size, bits, expected):
    layout = GroupLayout.for_shape(shape, group_size, bits)
    assert (layout.numel, layout.group_len, layout.n_groups, layout.bytes_per_group) == expected
    assert layout.padded_len == layout.bytes_per_group * layout.per_byte >= layout.group_len


def test_first_code_sits_in_the_low_bits():
    layout = GroupLayout(numel=5, group_len=5, bits=2)
    codes = torch.tensor([[1, 2, 3, 0, 3]], dtype=torch.uint8)
    packed = pack_codes(codes, layout)
    assert packed.tolist() == [[1 | 2 << 2 | 3 << 4 | 0 << 6, 3]]  # padding codes are 0


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("group_len", [1, 3, 8, 13, 64])
def test_pack_unpack_round_trip(bits, group_len):
    layout = GroupLayout(numel=7 * group_len, group_len=group_len, bits=bits)
    generator = torch.Generator().manual_seed(bits * 100 + group_len)
    codes = torch.randint(0, 2**bits, (7, group_len), generator=generator, dtype=torch.uint8)
    packed = pack_codes(codes, layout)
    assert packed.shape == (7, layout.bytes_per_group) and packed.dtype == torch.uint8
    assert torch.equal(unpack_codes(packed, layout), codes)
