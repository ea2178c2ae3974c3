"""Counter-based uniform noise: a hash of (element index, seed), for the CPU loops (`cpu-native` and
`cpu-inductor` draw the same noise).

`torch.rand` inside a torch.compile'd CPU function runs ~10x slower than the rest of the fused
quantize loop; a hash of the index is a few integer operations per element that inductor vectorizes
with everything else. Element `i` of a tensor quantized with seed `s` gets

    h = mix((i + k1) ^ k0),   u = (h >> 8) / 2**24          (k0, k1 = low, high 32 bits of s)

where `mix` is the `lowbias32` integer finalizer (C. Wellons, "Prospecting for Hash Functions",
2018): a bijection on 32-bit words with near-ideal avalanche, so neighbouring elements get
uncorrelated noise from one round. For a fixed `i`, `(i + k1) ^ k0` is uniform over 32-bit words
when the seed is, and `mix` is a bijection, so `u` is exactly uniform on the grid
`{0, 1, ..., 2**24 - 1} / 2**24` over seeds: stochastic rounding against it is unbiased up to 2**-25
of a step. (An earlier second round, `mix(mix(i ^ k0) + k1)`, cost quantize time and bought
nothing these properties need.) Arithmetic is on int32, which wraps; the logical right shifts of the C
original are arithmetic shifts with the sign-extended bits masked off.
"""

from __future__ import annotations

import torch

MAX_NUMEL = 2**31  # element indices are int32
_MUL_1 = 0x7FEB352D
_MUL_2 = 0x846CA68B - 2**32  # as a signed int32
_INV_2_24 = 1.0 / 2**24


def key_words(seed: int) -> tuple[int, int]:
    """The two int32 keys of a 63-bit seed (low and high 32 bits, as signed ints)."""
    low, high = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    as_int32 = lambda word: word - 2**32 if word >= 2**31 else word  # noqa: E731
    return as_int32(low), as_int32(high)


def seed_keys(seed: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """`key_words(seed)` as a tensor, so a compiled function takes a new seed without
    recompiling."""
    return torch.tensor(key_words(seed), dtype=torch.int32, device=device)


def _shr(h: torch.Tensor, shift: int) -> torch.Tensor:
    """Logical right shift of int32 words."""
    return (h >> shift) & ((1 << (32 - shift)) - 1)


def mix(h: torch.Tensor) -> torch.Tensor:
    """lowbias32 on int32 words (wrapping multiplies)."""
    h = h ^ _shr(h, 16)
    h = h * _MUL_1
    h = h ^ _shr(h, 15)
    h = h * _MUL_2
    return h ^ _shr(h, 16)


def counter_noise(keys: torch.Tensor, numel: int, start: int = 0) -> torch.Tensor:
    """float32 noise in [0, 1) for elements `start .. start + numel - 1` under `keys` (see
    `seed_keys`)."""
    if start + numel > MAX_NUMEL:
        raise ValueError(
            f"counter noise indexes elements with int32: at most 2**31 elements (got "
            f"{start + numel}); use the torch backend for larger tensors"
        )
    index = torch.arange(start, start + numel, dtype=torch.int32, device=keys.device)
    h = mix((index + keys[1]) ^ keys[0])
    return _shr(h, 8).float() * _INV_2_24
