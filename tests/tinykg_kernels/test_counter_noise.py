"""Counter noise: the int32 hash equals lowbias32 on unsigned words, and the noise is uniform both
across a tensor and, for one element, across seeds (what unbiased rounding needs)."""

from __future__ import annotations

import pytest
import torch

from tinykg_kernels.counter_noise import MAX_NUMEL, counter_noise, mix, seed_keys

M32 = 0xFFFFFFFF


def lowbias32(x: int) -> int:
    """The C original on unsigned 32-bit words."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    return x ^ (x >> 16)


def reference_noise(seed: int, i: int) -> float:
    k0, k1 = seed & M32, (seed >> 32) & M32
    h = lowbias32(((i + k1) & M32) ^ k0)
    return (h >> 8) / 2**24


def test_seed_keys_are_the_two_halves_as_signed_words():
    assert seed_keys(0x0000000500000007).tolist() == [7, 5]
    assert seed_keys(0x7FFFFFFF_FFFFFFFF).tolist() == [-1, 2**31 - 1]
    assert seed_keys(0x80000000_FFFFFFFF).tolist() == [-1, -(2**31)]
    assert seed_keys(0x80000000).tolist() == [-(2**31), 0]


def test_mix_is_lowbias32_on_unsigned_words():
    words = [0, 1, 2, 12345, 2**31 - 1, 2**31, 2**32 - 1, 0xDEADBEEF]
    signed = torch.tensor([w - 2**32 if w >= 2**31 else w for w in words], dtype=torch.int32)
    assert [v & M32 for v in mix(signed).tolist()] == [lowbias32(w) for w in words]


@pytest.mark.parametrize("seed", [0, 1, 2**62 + 987654321, 2**63 - 1])
def test_noise_matches_the_unsigned_formula(seed: int):
    noise = counter_noise(seed_keys(seed), 300)
    assert noise.dtype == torch.float32
    assert noise.tolist() == [reference_noise(seed, i) for i in range(300)]


def test_a_slice_of_the_noise_starts_at_its_index():
    keys = seed_keys(99)
    assert torch.equal(counter_noise(keys, 50, start=1000), counter_noise(keys, 1050)[1000:])


def lag1_correlation(u: torch.Tensor) -> float:
    a, b = u[:-1].double() - 0.5, u[1:].double() - 0.5
    return float((a * b).mean() / (a.square().mean() * b.square().mean()).sqrt())


def chi_square(u: torch.Tensor, bins: int = 64) -> float:
    counts = torch.histc(u.double(), bins=bins, min=0.0, max=1.0)
    expected = u.numel() / bins
    return float(((counts - expected) ** 2 / expected).sum())


def test_noise_across_a_tensor_is_uniform_and_uncorrelated():
    u = counter_noise(seed_keys(2024), 1 << 20)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    assert abs(float(u.double().mean()) - 0.5) < 4 * (1 / 12) ** 0.5 / 2**10
    # 63 degrees of freedom: the 99.99th percentile of chi-square is ~118
    assert chi_square(u) < 118
    assert abs(lag1_correlation(u)) < 5e-3
    # control: the index alone (no mixing) is as uniform as it gets but perfectly correlated
    plain = (torch.arange(1 << 20) % (1 << 12)).float() / (1 << 12)
    assert lag1_correlation(plain) > 0.99


def test_one_element_across_seeds_is_uniform():
    """What unbiased rounding needs: for a fixed element, E over seeds of u is 1/2 and u is uniform."""
    seeds = torch.randint(0, 2**62, (20000,), generator=torch.Generator().manual_seed(5)).tolist()
    for index in (0, 7, 123_456):
        u = torch.tensor([float(counter_noise(seed_keys(s), index + 1)[index]) for s in seeds])
        assert abs(float(u.mean()) - 0.5) < 4 * (1 / 12 / len(seeds)) ** 0.5
        assert chi_square(u, bins=20) < 54  # 19 degrees of freedom, 99.99th percentile ~ 50


def test_too_many_elements_are_refused_before_any_allocation():
    with pytest.raises(ValueError, match=r"at most 2\*\*31 elements.*use the torch backend"):
        counter_noise(seed_keys(0), MAX_NUMEL + 1)
    with pytest.raises(ValueError, match=r"at most 2\*\*31 elements"):
        counter_noise(seed_keys(0), 2, start=MAX_NUMEL - 1)
