import torch

from tinykg_train.compress.masks import PackedMask


def test_packed_mask_rebuilds_from_its_parts():
    mask = torch.rand(10, 3) > 0.3
    stored = PackedMask.pack(mask)
    assert stored.nbytes == 4
    rebuilt = PackedMask.rebuild(stored.meta(), stored.parts())
    assert torch.equal(rebuilt.decode(), mask)


def test_a_large_mask_round_trips_through_the_compiled_codec():
    mask = torch.rand(300, 257, generator=torch.Generator().manual_seed(1)) > 0.5
    stored = PackedMask.pack(mask)
    assert stored.nbytes == -(-mask.numel() // 8)
    assert torch.equal(stored.decode(), mask)
