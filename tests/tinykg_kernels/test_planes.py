"""The plane layout of 1-bit masks: element i in byte i % k at bit i // k, round trips, errors."""

from __future__ import annotations

import pytest
import torch

from tinykg_kernels import pack_planes, planes, unpack_planes
from tinykg_kernels.planes import mask_bytes


def test_element_i_sits_in_byte_i_mod_k_at_bit_i_div_k():
    mask = torch.zeros(20, dtype=torch.bool)  # k = 3 bytes; planes of 3 elements, the last short
    mask[[0, 4, 8, 19]] = True  # byte 0 bit 0; byte 1 bit 1; byte 2 bit 2; byte 1 bit 6
    assert pack_planes(mask).tolist() == [1, 2 + 64, 4]


@pytest.mark.parametrize("shape", [(1,), (9,), (6, 10), (64, 33)])
def test_pack_and_unpack_round_trip_and_float_unpacking(shape):
    mask = torch.randn(shape, generator=torch.Generator().manual_seed(4)) > 0
    packed = pack_planes(mask)
    assert packed.numel() == mask_bytes(mask.numel())
    assert torch.equal(unpack_planes(packed, shape), mask)
    assert torch.equal(unpack_planes(packed, shape, dtype=torch.float32), mask.float())


def test_bad_input_says_what_to_pass():
    with pytest.raises(TypeError, match=r"expects a bool tensor \(got torch.float32\)"):
        pack_planes(torch.zeros(3))
    with pytest.raises(
        ValueError, match=r"3 uint8 bytes of a plane-packed mask of shape \(3, 7\) \(got 2"
    ):
        unpack_planes(torch.zeros(2, dtype=torch.uint8), (3, 7))


def test_the_unrolled_and_the_whole_tensor_packing_give_the_same_bytes():
    """The compiled loops pack one plane at a time, the eager path in three whole-tensor ops."""
    mask = torch.rand(8, 1001, generator=torch.Generator().manual_seed(5)) > 0.5
    unrolled = planes.pack(mask, unrolled=True)
    assert torch.equal(unrolled, planes.pack(mask))
    assert torch.equal(planes.unpack(unrolled), mask)


@pytest.mark.parametrize("numel", [1, 13, 64, 1000, 4099])
def test_plane_bits_of_any_range_are_that_range_of_the_mask(numel):
    mask = torch.rand(numel, generator=torch.Generator().manual_seed(numel)) > 0.5
    packed = pack_planes(mask)
    for start, stop in [(0, numel), (0, 0), (numel // 3, numel // 3 + 1), (1, numel - 1),
                        (numel // 8, numel), (numel // 2, numel // 2 + numel // 3)]:  # fmt: skip
        start, stop = min(start, numel), max(min(stop, numel), min(start, numel))
        assert torch.equal(planes.plane_bits(packed, start, stop, numel), mask[start:stop])
    with pytest.raises(ValueError, match="plane_bits needs 0 <= start <= stop"):
        planes.plane_bits(packed, 2, 1, numel)
