import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.codec import Compressed, compress, decompress


def test_keeps_what_is_not_worth_compressing():
    x = torch.randn(64, 64)
    assert compress(x, CompressionConfig()) is x  # bits=32
    assert compress(x[:2, :2], CompressionConfig(bits=2)) is not None
    small = torch.randn(10)
    assert compress(small, CompressionConfig(bits=2)) is small  # under min_numel
    ints = torch.arange(1000)
    assert compress(ints, CompressionConfig(bits=2)) is ints
    assert compress(None, CompressionConfig(bits=2)) is None


@pytest.mark.parametrize("bits", [8, 4, 2, 1])
def test_round_trip_within_one_step_and_smaller(bits):
    x = torch.randn(200, 64, generator=torch.Generator().manual_seed(0))
    config = CompressionConfig(bits=bits)
    stored = compress(x, config)
    assert isinstance(stored, Compressed)
    restored = decompress(stored)
    assert restored.shape == x.shape and restored.dtype == x.dtype
    groups = x.reshape(-1, config.group_for(tuple(x.shape)) or 64)  # one row; two rows at 1 bit
    step = (groups.amax(dim=1, keepdim=True) - groups.amin(dim=1, keepdim=True)) / (2**bits - 1)
    error = (restored - x).reshape(groups.shape).abs()
    assert bool((error <= step * 1.01 + 1e-6).all())
    assert stored.nbytes == sum(t.numel() * t.element_size() for t in stored.parts())
    assert x.numel() * 4 / stored.nbytes >= {8: 3.5, 4: 7, 2: 12, 1: 20}[bits]


def test_rebuilds_from_its_parts_and_meta():
    x = torch.randn(300)
    stored = compress(x, CompressionConfig(bits=4))
    rebuilt = Compressed.rebuild(stored.meta(), stored.parts())
    assert torch.equal(rebuilt.decode(), stored.decode())


def test_one_tensor_version_is_compressed_once_inside_a_block():
    x = torch.randn(100, 64)
    config = CompressionConfig(bits=2)
    assert compress(x, config) is not compress(x, config)  # no block: no sharing
    with ActivationMeter():
        first = compress(x, config)
        assert compress(x, config) is first
        assert compress(x, CompressionConfig(bits=4)) is not first
        x.add_(1.0)  # a new version: compressed anew
        assert compress(x, config) is not first


def test_a_tensor_stored_wider_serves_the_ops_that_save_it_at_fewer_bits():
    x = torch.randn(100, 64)
    config = CompressionConfig(bits=2)
    with ActivationMeter():
        wide = compress(x, config.for_normalized())  # 4 bits, as ops.l2_normalize saves
        assert wide.quantized.bits == 4
        assert compress(x, config) is wide  # not a second, 2-bit copy
        assert compress(x, CompressionConfig(bits=8)) is not wide  # never narrower than asked
        y = torch.randn(100, 64)
        narrow = compress(y, config)
        assert narrow.quantized.bits == 2 and compress(y, config.for_normalized()) is not narrow


def test_projection_stores_fewer_columns_and_reconstructs_unbiasedly():
    x = torch.randn(64, 128, generator=torch.Generator().manual_seed(0))
    config = CompressionConfig(bits=8, projection_ratio=4)
    plain = compress(x, CompressionConfig(bits=8), project=True)
    projected = compress(x, config, project=True)
    assert projected.projection is not None
    assert projected.nbytes < plain.nbytes / 3
    assert compress(x, config).projection is None  # only where asked (linear inputs)
    torch.manual_seed(0)
    mean = torch.stack([decompress(compress(x, config, project=True)) for _ in range(400)]).mean(0)
    single = decompress(projected)
    assert (mean - x).norm() < 0.2 * (single - x).norm()
