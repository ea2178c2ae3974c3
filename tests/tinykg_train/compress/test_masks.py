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


def test_the_positive_mask_is_x_greater_than_zero_but_for_nan():
    x = torch.randn(300, 64, generator=torch.Generator().manual_seed(1))
    x[0, :4] = torch.tensor([0.0, -0.0, float("inf"), float("-inf")])
    x[1, 0] = torch.finfo(torch.float32).tiny / 4  # a subnormal positive
    assert torch.equal(PackedMask.positive(x).decode(), x > 0)
    x[2, 0] = float("nan")
    assert bool(PackedMask.positive(x).decode()[2, 0])  # NaN counts positive (the loss is NaN)
