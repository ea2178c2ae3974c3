"""quantize / dequantize / QuantizedTensor on the torch path: shapes, dtypes, unbiasedness, errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tinykg_kernels import QuantizedTensor, dequantize, quantize, reference
from tinykg_kernels.packing import GroupLayout

pytestmark = pytest.mark.usefixtures("torch_backend")


@pytest.fixture
def torch_backend(monkeypatch):
    """These tests pin the torch path; tests/tinykg_kernels/test_triton_ops.py covers Triton."""
    monkeypatch.setenv("TINYKG_KERNELS_BACKEND", "torch")


def draws_of(x: torch.Tensor, n: int) -> torch.Tensor:
    """`n` copies of `x` stacked as rows: one quantize call then gives `n` independent draws."""
    return x.repeat(n, 1)


def max_z_of_mean(x: torch.Tensor, back: torch.Tensor, step: torch.Tensor, n: int) -> float:
    """Largest |mean of draws - x| in units of the bound on its standard deviation (step / 2 / sqrt(n))."""
    mean = back.view(n, *x.shape).double().mean(0)
    return ((mean - x.double()).abs() / (step.double() / 2 / n**0.5)).max().item()


# ---------------------------------------------------------------- shapes and dtypes


@pytest.mark.parametrize("shape", [(33, 70), (5, 3, 17), (1000,), (), (0, 64), (4, 0), (0,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_round_trip_keeps_shape_dtype_and_stays_within_half_a_step(shape, dtype):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    q = quantize(x, bits=4, stochastic=False)
    back = dequantize(q)
    assert back.shape == x.shape and back.dtype == dtype and back.device == x.device
    if x.numel():
        layout = q.layout
        step = reference.grouped(q.scale.float().repeat_interleave(layout.group_len), layout)
        step = step.reshape(-1)[: x.numel()].view(shape)
        ulp = torch.finfo(dtype).eps * x.float().abs()  # the cast back to `dtype` rounds once more
        assert ((back.float() - x.float()).abs() <= step / 2 + ulp + 1e-6).all()


@pytest.mark.parametrize(("shape", "group_size"), [((1000,), 64), ((7, 9), 5), ((3, 8), 24)])
def test_blocks_of_group_size_elements(shape, group_size):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    q = quantize(x, bits=8, group_size=group_size, stochastic=False)
    assert q.scale.shape == (-(-x.numel() // group_size),)
    assert (dequantize(q) - x).abs().max() < (x.max() - x.min()) / 255


def test_non_contiguous_input_quantizes_like_its_contiguous_copy():
    x = torch.randn(40, 24, generator=torch.Generator().manual_seed(2)).t()
    assert not x.is_contiguous()
    q, q_ref = quantize(x, seed=3), quantize(x.contiguous(), seed=3)
    assert torch.equal(q.codes, q_ref.codes) and torch.equal(q.scale, q_ref.scale)
    assert dequantize(q).shape == (24, 40)


def test_input_that_requires_grad_gives_plain_tensors():
    x = torch.randn(8, 16, requires_grad=True)
    q = quantize(x)
    assert not any(t.requires_grad for t in q.tensors())


# ---------------------------------------------------------------- memory


def test_int2_on_rows_of_64_float32_compresses_at_least_12x():
    x = torch.randn(1000, 64)
    q = quantize(x, bits=2)
    assert q.nbytes == q.codes.numel() + q.scale.numel() * 2 + q.zero.numel() * 2
    assert q.nbytes == 1000 * (16 + 2 + 2)
    assert x.nbytes / q.nbytes >= 12


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_compression_ratio_per_bit_width(bits):
    x = torch.randn(100, 64)
    row_bytes = 64 * bits // 8 + 2 + 2  # codes, then a 16-bit scale and zero point
    assert x.nbytes / quantize(x, bits=bits).nbytes == pytest.approx(256 / row_bytes)


# ---------------------------------------------------------------- unbiasedness


@pytest.mark.parametrize(
    ("bits", "scheme"),
    [(1, "uniform"), (2, "uniform"), (4, "uniform"), (8, "uniform"), (2, "normal")],
)
def test_mean_of_many_draws_converges_to_x(bits, scheme):
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(4))
    n = 4096
    q = quantize(draws_of(x, n), bits=bits, scheme=scheme, seed=5)
    step = q.scale.float()[:8, None].expand(8, 64)  # every copy of a row has the same scale
    if scheme == "normal":
        step = step * max(
            b - a for a, b in zip(q.layout and (0.0,), (1.0,), strict=True)
        )  # widest interval <= 1 scale
    assert max_z_of_mean(x, dequantize(q), step, n) < 5.0


def test_the_unbiasedness_check_catches_a_biased_rounding():
    """Control: noise drawn from [0, 0.9) instead of [0, 1) rounds down too often; the same
    statistic must flag it. So does round-to-nearest."""
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(4))
    n = 4096
    rows = draws_of(x, n)
    layout = GroupLayout.for_shape(tuple(rows.shape), None, 2)
    noise = torch.rand(rows.numel(), generator=torch.Generator().manual_seed(5)) * 0.9
    codes, scale, zero = reference.quantize(
        rows.reshape(-1), layout, "uniform", torch.bfloat16, noise
    )
    back = reference.dequantize(codes, scale, zero, layout, "uniform", torch.float32)
    step = scale.float()[:8, None].expand(8, 64)
    assert max_z_of_mean(x, back, step, n) > 5.0
    nearest = quantize(rows, bits=2, stochastic=False)
    assert max_z_of_mean(x, dequantize(nearest), step, n) > 5.0


def test_normal_scheme_has_lower_variance_than_uniform_on_gaussian_rows():
    """Control: on uniformly spread rows the normal levels are the worse choice; so the gain on
    Gaussian rows comes from fitting the distribution, not from a flaw in the measurement."""
    generator = torch.Generator().manual_seed(6)
    n = 256
    gaussian = torch.randn(64, 64, generator=generator)
    flat = torch.rand(64, 64, generator=generator) * 4 - 2

    def mse(x: torch.Tensor, scheme: str) -> float:
        rows = draws_of(x, n)
        return (
            (dequantize(quantize(rows, bits=2, scheme=scheme, seed=7)) - rows).pow(2).mean().item()
        )

    assert mse(gaussian, "normal") < 0.95 * mse(gaussian, "uniform")
    assert mse(flat, "normal") > mse(flat, "uniform")


# ---------------------------------------------------------------- seeds


def test_seeds_make_draws_reproducible():
    x = torch.randn(64, 64)
    assert torch.equal(quantize(x, seed=1).codes, quantize(x, seed=1).codes)
    assert not torch.equal(quantize(x, seed=1).codes, quantize(x, seed=2).codes)
    torch.manual_seed(0)
    first = quantize(x).codes
    torch.manual_seed(0)
    assert torch.equal(first, quantize(x).codes)  # seed=None draws from torch's RNG


def test_round_to_nearest_ignores_seeds():
    x = torch.randn(64, 64)
    assert torch.equal(
        quantize(x, stochastic=False, seed=1).codes, quantize(x, stochastic=False).codes
    )


# ---------------------------------------------------------------- special rows


@pytest.mark.parametrize("stochastic", [True, False])
@pytest.mark.parametrize("bits", [1, 2, 8])
def test_constant_and_zero_rows_round_trip_exactly(stochastic, bits):
    values = [0.0, 1.5, -3.0, 2.0**-20, 2.0**-100, -(2.0**100)]  # all on the bfloat16 grid
    x = torch.tensor(values)[:, None].expand(6, 13).contiguous()
    q = quantize(x, bits=bits, stochastic=stochastic)
    assert torch.equal(dequantize(q), x)


@pytest.mark.parametrize(
    ("dtype", "scale_dtype"),
    [(torch.float16, None), (torch.bfloat16, None), (torch.float32, torch.float32)],
)
def test_any_constant_round_trips_when_the_parameters_can_hold_it(dtype, scale_dtype):
    """float16/bfloat16 inputs keep float16/bfloat16 zero points; float32 needs scale_dtype=float32."""
    x = torch.full((4, 9), 0.1, dtype=dtype)
    assert torch.equal(dequantize(quantize(x, scale_dtype=scale_dtype)), x)


def test_a_float32_constant_off_the_bfloat16_grid_stays_within_one_small_step():
    x = torch.full((4, 9), 0.1)
    back = dequantize(quantize(x, bits=2, seed=0))
    assert (back - x).abs().max() < 0.1 * 2**-7  # one bfloat16 ulp of the zero point


def test_nan_or_inf_raises_one_clear_line():
    x = torch.randn(4, 8)
    x[1, 2] = float("nan")
    x[3, 0] = float("-inf")
    with pytest.raises(ValueError, match=r"2 NaN/Inf values \(in 2 of 4 groups") as info:
        quantize(x)
    assert "\n" not in str(info.value) and "check_finite=False" in str(info.value)


def test_check_finite_false_stores_bad_groups_as_nan():
    x = torch.randn(4, 8)
    x[1, 2] = float("nan")
    back = dequantize(quantize(x, bits=8, stochastic=False, check_finite=False))
    assert back[1].isnan().all()
    assert not back[[0, 2, 3]].isnan().any()


def test_float16_scale_overflow_names_the_fix():
    x = torch.tensor([[-60000.0, 60000.0]], dtype=torch.float16)
    with pytest.raises(
        ValueError, match=r"overflows scale_dtype=torch.float16; pass scale_dtype=torch.float32"
    ):
        quantize(x, bits=1)
    assert torch.equal(
        dequantize(quantize(x, bits=1, scale_dtype=torch.float32, stochastic=False)), x
    )


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"bits": 3}, ValueError, r"bits must be one of 1, 2, 4, 8 \(got 3\)"),
        ({"bits": True}, ValueError, "bits must be one of"),
        ({"group_size": 0}, ValueError, r"group_size must be a positive integer or None \(got 0\)"),
        ({"group_size": 2.5}, ValueError, "group_size must be a positive integer"),
        ({"scheme": "log"}, ValueError, "scheme must be 'uniform' or 'normal'"),
        ({"scheme": "normal", "bits": 4}, ValueError, "scheme='normal' supports bits=2 only"),
        ({"seed": -1}, ValueError, r"seed must be None or an integer in \[0, 2\*\*63\)"),
        ({"scale_dtype": torch.int8}, ValueError, "scale_dtype must be None"),
        (
            {"backend": "cuda"},
            ValueError,
            r"backend must be one of auto, torch, cpu-native, cpu-inductor, triton \(got 'cuda'\)",
        ),
    ],
)
def test_bad_arguments_raise_one_clear_line(kwargs, error, fragment):
    with pytest.raises(error, match=fragment) as info:
        quantize(torch.randn(4, 4), **kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("x", "fragment"),
    [
        (torch.arange(4), "float32/float16/bfloat16/float64 tensor \\(got torch.int64\\)"),
        ([1.0], "torch.Tensor"),
    ],
)
def test_non_float_input_is_refused(x, fragment):
    with pytest.raises(TypeError, match=fragment):
        quantize(x)


def test_dequantize_refuses_anything_but_a_quantized_tensor():
    with pytest.raises(TypeError, match="QuantizedTensor"):
        dequantize(torch.zeros(3))


# ---------------------------------------------------------------- QuantizedTensor


def test_parts_rebuild_the_same_quantized_tensor():
    x = torch.randn(6, 10)
    q = quantize(x, bits=2, group_size=4, scheme="normal", seed=1)
    rebuilt = QuantizedTensor.from_tensors(q.meta, list(q.tensors()))
    assert torch.equal(dequantize(rebuilt), dequantize(q))
    assert rebuilt.meta == q.meta and hash(q.meta) == hash(rebuilt.meta)
    assert torch.equal(dequantize(q.to("cpu")), dequantize(q))
    assert "shape=(6, 10)" in repr(q) and "nbytes=" in repr(q)
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.bits = 4


def test_mismatched_parts_are_refused():
    q = quantize(torch.randn(6, 10))
    codes, scale, zero = q.tensors()
    with pytest.raises(ValueError, match=r"codes must be uint8 of shape \(6, 3\)"):
        QuantizedTensor.from_tensors(q.meta, (codes[:5], scale, zero))
    with pytest.raises(ValueError, match=r"scale must have shape \(6,\)"):
        QuantizedTensor.from_tensors(q.meta, (codes, scale[:2], zero))


class _MulSavingCompressedInput(torch.autograd.Function):
    """y = x * w, keeping x for backward as 8-bit codes through ctx.save_for_backward."""

    @staticmethod
    def forward(ctx, x, w):
        q = quantize(x, bits=8, seed=0)
        ctx.save_for_backward(*q.tensors())
        ctx.meta = q.meta
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x = dequantize(QuantizedTensor.from_tensors(ctx.meta, ctx.saved_tensors))
        return None, (grad * x).sum(0)


def test_an_autograd_function_can_save_the_parts():
    x, w = torch.randn(32, 16), torch.randn(16, requires_grad=True)
    _MulSavingCompressedInput.apply(x, w).sum().backward()
    exact = x.sum(0)
    assert torch.allclose(w.grad, exact, atol=0.2)
    assert not torch.equal(w.grad, exact)  # it really went through the codes
