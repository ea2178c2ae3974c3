"""1-bit masks: round trips at one bit per element, least significant bit first, and the CPU loops
(inductor's; `cpu-native` has none and steps down to them) pack the same bytes as the torch ops."""

from __future__ import annotations

import pytest
import torch

from tinykg_kernels import backend_usage, dispatch, pack_bits, unpack_bits
from tinykg_kernels.bitmask import pack_bits_eagerly


def random_mask(shape, seed: int = 0) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.5


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (8,), (9,), (3, 5, 7), (64, 33), (1000, 61)])
def test_pack_and_unpack_round_trip_at_one_bit_per_element(shape, backend: str):
    mask = random_mask(shape)
    packed = pack_bits(mask, backend=backend)
    assert packed.dtype == torch.uint8 and packed.numel() == (mask.numel() + 7) // 8
    assert torch.equal(unpack_bits(packed, mask.shape, backend=backend), mask)


def test_bit_order_is_least_significant_first(backend: str):
    mask = torch.tensor([True, False, False, False, False, False, False, True, True])
    assert pack_bits(mask, backend=backend).tolist() == [129, 1]


@pytest.mark.parametrize("numel", [8, 4096, 70_001])
def test_inductor_bytes_equal_the_torch_ops(numel: int):
    mask = random_mask((numel,), seed=numel)
    assert torch.equal(pack_bits(mask, backend="cpu-inductor"), pack_bits_eagerly(mask))


def test_auto_packs_large_cpu_masks_in_inductor_s_loops(monkeypatch, cpu_loops):
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    before = backend_usage()
    pack_bits(random_mask((10, 10)))
    big = random_mask((dispatch.CPU_LOOPS_MIN_NUMEL,))
    assert torch.equal(unpack_bits(pack_bits(big), big.shape), big)
    assert backend_usage(since=before) == {  # no native mask loops: inductor's either way
        "pack_bits": {"cpu-inductor": 1, "torch": 1},
        "unpack_bits": {"cpu-inductor": 1},
    }


def test_works_on_non_contiguous_masks():
    mask = random_mask((6, 10)).t()
    assert torch.equal(unpack_bits(pack_bits(mask), mask.shape), mask)


def test_bad_input_says_what_to_pass():
    with pytest.raises(TypeError, match=r"expects a bool tensor \(got torch.float32\)"):
        pack_bits(torch.zeros(3))
    with pytest.raises(ValueError, match=r"2 packed bytes cannot hold a mask of shape \(3, 7\)"):
        unpack_bits(torch.zeros(2, dtype=torch.uint8), (3, 7))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7,), (64, 33), (1000, 61)])
def test_unpacks_to_ones_and_zeros_of_a_float_dtype(shape, dtype, backend: str):
    mask = random_mask(shape, seed=3)
    values = unpack_bits(pack_bits(mask, backend=backend), mask.shape, backend=backend, dtype=dtype)
    assert values.dtype == dtype and values.shape == mask.shape
    assert torch.equal(values, mask.to(dtype))
