"""The pure-torch codec: directed rounding of the stored parameters, coverage, error bounds."""

from __future__ import annotations

import pytest
import torch

from tinykg_kernels import reference
from tinykg_kernels.packing import GroupLayout

SPECIALS = [0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-40, -3e-39, 1e-8, -1e-8, 6e-5, 65504.0,
            65519.0, 65520.0, 70000.0, -70000.0, 3.0e38, -3.0e38, 3.4e38, -3.4e38]  # fmt: skip


def awkward_floats(n: int = 20_000) -> torch.Tensor:
    """float32 values over the whole exponent range, both signs, plus hand-picked edge cases."""
    generator = torch.Generator().manual_seed(0)
    mantissa = torch.rand(n, generator=generator, dtype=torch.float64) + 1.0
    exponent = torch.randint(-150, 128, (n,), generator=generator).to(torch.float64)
    sign = torch.randint(0, 2, (n,), generator=generator).to(torch.float64) * 2 - 1
    values = (sign * mantissa * torch.pow(2.0, exponent)).to(torch.float32)
    return torch.cat([torch.tensor(SPECIALS, dtype=torch.float32), values])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("up", [False, True])
def test_directed_rounding_is_the_tightest_bound_on_the_right_side(dtype, up):
    v = awkward_floats()
    v = v[torch.isfinite(v)]
    r = reference.round_directed(v, dtype, up=up)
    assert r.dtype == dtype
    rf = r.double()
    if up:
        assert (rf >= v.double()).all()
        beyond = reference._next_toward(r, up=False).double()  # one step back crosses v
        assert (beyond < v.double()).all()
    else:
        assert (rf <= v.double()).all()
        beyond = reference._next_toward(r, up=True).double()
        assert (beyond > v.double()).all()


@pytest.mark.parametrize("up", [False, True])
def test_bfloat16_rounding_on_the_bits_equals_the_conversion_route(up):
    specials = torch.tensor([float("nan"), float("inf"), float("-inf")])
    largest = torch.tensor([0x7F7FFFFF, -1, 0x7F7F0001, 0x0000FFFF], dtype=torch.int32)
    v = torch.cat([awkward_floats(), specials, largest.view(torch.float32)])
    got = reference.round_directed(v, torch.bfloat16, up=up)
    want = reference.round_directed_by_conversion(v, torch.bfloat16, up=up)
    finite = torch.isfinite(want) | torch.isinf(want)
    assert torch.equal(got[finite].view(torch.int16), want[finite].view(torch.int16))
    assert torch.equal(got.isnan(), want.isnan())


def test_directed_rounding_keeps_nan_and_infinities_and_float32():
    v = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.1])
    down = reference.round_directed(v, torch.bfloat16, up=False)
    assert down[0].isnan() and down[1] == float("inf") and down[2] == float("-inf")
    assert torch.equal(reference.round_directed(v[1:], torch.float32, up=True), v[1:])


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("param_dtype", reference.PARAM_DTYPES)
def test_stored_parameters_cover_every_group(bits, param_dtype):
    generator = torch.Generator().manual_seed(bits)
    x = torch.randn(512, 33, generator=generator) * torch.logspace(-3, 3, 512)[:, None]
    x[:64] += 1000.0  # groups far from zero: the zero point's rounding matters most here
    lo, hi = torch.aminmax(x, dim=1)
    layout = GroupLayout(numel=x.numel(), group_len=33, bits=bits)
    zero, scale, bad = reference.group_params(
        lo, hi, reference.steps_for("uniform", layout), param_dtype
    )
    assert not bad.any()
    top = zero.double() + layout.max_code * scale.double()
    assert (zero.double() <= lo.double()).all()
    assert (top >= hi.double() * (1 - 1e-6) - 1e-12).all()  # up to one float32 rounding


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_round_to_nearest_is_within_half_a_step(bits):
    x = torch.randn(64, 37, generator=torch.Generator().manual_seed(1))
    layout = GroupLayout(numel=x.numel(), group_len=37, bits=bits)
    codes, scale, zero = reference.quantize(x.reshape(-1), layout, "uniform", torch.bfloat16, None)
    back = reference.dequantize(codes, scale, zero, layout, "uniform", torch.float32).view_as(x)
    step = scale.float()[:, None]
    assert ((back - x).abs() <= step / 2 + 1e-6).all()


def test_noise_moves_each_value_at_most_one_step_to_a_neighbouring_level():
    x = torch.randn(64, 37, generator=torch.Generator().manual_seed(2))
    layout = GroupLayout(numel=x.numel(), group_len=37, bits=2)
    noise = torch.rand(x.numel(), generator=torch.Generator().manual_seed(3))
    codes, scale, zero = reference.quantize(x.reshape(-1), layout, "uniform", torch.bfloat16, noise)
    back = reference.dequantize(codes, scale, zero, layout, "uniform", torch.float32).view_as(x)
    assert ((back - x).abs() < scale.float()[:, None]).all()
    again = reference.quantize(x.reshape(-1), layout, "uniform", torch.bfloat16, noise)[0]
    assert torch.equal(codes, again)  # same noise, same codes


def test_bad_groups_store_nan_and_zero_codes():
    x = torch.ones(4, 8)
    x[1, 3] = float("nan")
    x[2, 0] = float("inf")
    x[3] = torch.tensor([0.0, 70000.0] * 4)  # its 1-bit scale overflows float16
    layout = GroupLayout(numel=32, group_len=8, bits=1)
    codes, scale, zero = reference.quantize(x.reshape(-1), layout, "uniform", torch.float16, None)
    assert scale.isnan().tolist() == [False, True, True, True]
    assert zero[1:].isnan().all() and (codes[1:] == 0).all()
    back = reference.dequantize(codes, scale, zero, layout, "uniform", torch.float32).view(4, 8)
    assert torch.equal(back[0], x[0]) and back[1:].isnan().all()


def test_short_last_group_is_padded_without_changing_its_range():
    x = torch.tensor([5.0, 6.0, 7.0, 1.0, 2.0])  # groups [5, 6, 7] and [1, 2]
    layout = GroupLayout(numel=5, group_len=3, bits=8)
    grouped = reference.grouped(x, layout)
    assert grouped.tolist() == [[5.0, 6.0, 7.0], [1.0, 2.0, 2.0]]
    codes, scale, zero = reference.quantize(x, layout, "uniform", torch.float32, None)
    assert codes[1, 2] == 0  # padding code
    assert zero.tolist() == [5.0, 1.0]
