"""The kernels' integer-arithmetic float conversions agree bit for bit with torch's."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from tinykg_kernels import dispatch, reference  # noqa: E402
from tinykg_kernels.triton_bits import bf16_bits_nearest, load_param, round_param  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and not dispatch.triton_ops().INTERPRETED:
    pytest.skip(
        "CPU tensors need Triton's interpreter (TRITON_INTERPRET=1)", allow_module_level=True
    )
BLOCK = 1 << 15 if DEVICE == "cpu" else 1024  # the interpreter likes few, big programs


@triton.jit
def _round_both_ways(
    v_ptr, down_ptr, up_ptr, down_value_ptr, n, PARAM: tl.constexpr, BLOCK: tl.constexpr
):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    v = tl.load(v_ptr + i, mask=ok, other=0.0)
    down_bits, down_value = round_param(v, False, PARAM)
    up_bits, _ = round_param(v, True, PARAM)
    tl.store(down_ptr + i, down_bits.to(tl.int16), mask=ok)
    tl.store(up_ptr + i, up_bits.to(tl.int16), mask=ok)
    tl.store(down_value_ptr + i, down_value, mask=ok)


@triton.jit
def _decode_and_round_nearest(
    bits_ptr, decoded_ptr, v_ptr, nearest_ptr, n, PARAM: tl.constexpr, BLOCK: tl.constexpr
):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    tl.store(decoded_ptr + i, load_param(bits_ptr, i, ok, PARAM), mask=ok)
    v = tl.load(v_ptr + i, mask=ok, other=0.0)
    tl.store(nearest_ptr + i, bf16_bits_nearest(v).to(tl.int16), mask=ok)


def awkward_floats() -> torch.Tensor:
    """Every exponent, both signs, 16-bit grid points and their neighbours, specials."""
    generator = torch.Generator().manual_seed(0)
    n = 30_000
    mantissa = torch.rand(n, generator=generator, dtype=torch.float64) + 1.0
    exponent = torch.randint(-150, 128, (n,), generator=generator).to(torch.float64)
    sign = torch.randint(0, 2, (n,), generator=generator).to(torch.float64) * 2 - 1
    values = (sign * mantissa * torch.pow(2.0, exponent)).to(torch.float32)
    grid = torch.arange(-32768, 32768, 37, dtype=torch.int32).to(torch.int16)
    on_grid = torch.cat([grid.view(torch.float16).float(), grid.view(torch.bfloat16).float()])
    specials = torch.tensor([0.0, -0.0, 65504.0, 65519.0, 65520.0, 70000.0, -70000.0, 3.4e38, -3.4e38,
                             1e-45, -1e-45, 6e-8, 5.9e-8, float("inf"), float("-inf"), float("nan")])  # fmt: skip
    return torch.cat([values, on_grid, torch.nextafter(on_grid, torch.tensor(1e39)), specials])


def same_bits_or_both_nan(bits: torch.Tensor, expected: torch.Tensor) -> bool:
    both_nan = bits.isnan() & expected.isnan()
    return bool(((bits.view(torch.int16) == expected.view(torch.int16)) | both_nan).all())


@pytest.mark.parametrize(("param", "dtype"), [(0, torch.bfloat16), (1, torch.float16)])
def test_directed_rounding_matches_the_reference(param, dtype):
    v = awkward_floats().to(DEVICE)
    down, up = (torch.empty(v.shape, dtype=torch.int16, device=DEVICE) for _ in range(2))
    down_value = torch.full(v.shape, float("nan"), device=DEVICE)
    _round_both_ways[(triton.cdiv(v.numel(), BLOCK),)](
        v, down, up, down_value, v.numel(), PARAM=param, BLOCK=BLOCK
    )
    expected_down = reference.round_directed(v, dtype, up=False)
    expected_up = reference.round_directed(v, dtype, up=True)
    assert same_bits_or_both_nan(down.view(dtype), expected_down)
    assert same_bits_or_both_nan(up.view(dtype), expected_up)
    finite = torch.isfinite(expected_down)
    assert torch.equal(down_value[finite], expected_down.float()[finite])  # value matches its bits


@pytest.mark.parametrize(("param", "dtype"), [(0, torch.bfloat16), (1, torch.float16)])
def test_decoding_every_16_bit_pattern_and_rounding_to_nearest(param, dtype):
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).to(DEVICE)
    decoded = torch.empty(bits.shape, device=DEVICE)
    v = torch.cat([awkward_floats(), torch.randn(65536 - awkward_floats().numel() % 65536)])[
        :65536
    ].to(DEVICE)
    nearest = torch.empty(v.shape, dtype=torch.int16, device=DEVICE)
    grid = (triton.cdiv(bits.numel(), BLOCK),)
    _decode_and_round_nearest[grid](
        bits, decoded, v, nearest, bits.numel(), PARAM=param, BLOCK=BLOCK
    )
    expected = bits.view(dtype).float()
    assert bool(((decoded == expected) | (decoded.isnan() & expected.isnan())).all())
    assert same_bits_or_both_nan(nearest.view(torch.bfloat16), v.to(torch.bfloat16))
