import pytest
import torch

from tinykg_train.compress.masks import PackedMask, pack_bits, unpack_bits


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (8,), (9,), (3, 5, 7), (64, 33)])
def test_pack_and_unpack_round_trip_at_one_bit_per_element(shape):
    mask = torch.rand(shape, generator=torch.Generator().manual_seed(0)) > 0.5
    packed = pack_bits(mask)
    assert packed.dtype == torch.uint8 and packed.numel() == (mask.numel() + 7) // 8
    assert torch.equal(unpack_bits(packed, mask.shape), mask)


def test_bit_order_is_least_significant_first():
    mask = torch.tensor([True, False, False, False, False, False, False, True, True])
    assert pack_bits(mask).tolist() == [129, 1]


def test_packed_mask_rebuilds_from_its_parts():
    mask = torch.rand(10, 3) > 0.3
    stored = PackedMask.pack(mask)
    assert stored.nbytes == 4
    rebuilt = PackedMask.rebuild(stored.meta(), stored.parts())
    assert torch.equal(rebuilt.decode(), mask)


def test_works_on_non_contiguous_masks():
    mask = (torch.rand(6, 10) > 0.5).t()
    assert torch.equal(unpack_bits(pack_bits(mask), mask.shape), mask)
