"""`apply_dropout_noise` / `dropout_noise_backward`: torch's products bit for bit, the keep mask in
the plane layout, on both backends; clear errors."""

from __future__ import annotations

import pytest
import torch

from tinykg_kernels import apply_dropout_noise, dropout_noise_backward, unpack_planes


def noise_like(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """F.dropout's CPU noise: bernoulli(1 - p) / (1 - p)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.empty_like(x).bernoulli_(1 - p, generator=generator).div_(1 - p)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("shape", [(5, 7), (300, 64), (4099, 3), (2, 2048, 3)])
def test_products_and_mask_are_torch_s_bit_for_bit(shape, p: float, backend: str):
    gen = torch.Generator().manual_seed(1)
    x, grad = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    noise = noise_like(x, p, seed=2)
    out, kept = apply_dropout_noise(x, noise, backend=backend)
    assert torch.equal(out, x * noise)
    assert torch.equal(unpack_planes(kept, shape), noise != 0)
    kept_value = torch.ones(()).div_(1 - p).item()
    back = dropout_noise_backward(grad, kept, kept_value, backend=backend)
    assert torch.equal(back, grad * noise)
    assert torch.equal(back.signbit(), (grad * noise).signbit())  # -0 where a negative is dropped


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_bare_draws_with_the_kept_value_as_scale_give_the_same_products(dtype, backend):
    x = torch.randn(512, 64, dtype=dtype)
    x[0, :4] = torch.tensor([float("inf"), float("nan"), -0.0, -1.0])
    generator = torch.Generator().manual_seed(4)
    draws = torch.empty_like(x).bernoulli_(0.7, generator=generator)
    draws[0, :4] = 0  # dropped: inf * 0 is NaN, -1 * 0 is -0, as in F.dropout
    kept_value = torch.ones((), dtype=dtype).div_(0.7).item()
    noise = draws * kept_value
    out, kept = apply_dropout_noise(x, draws, backend=backend, scale=kept_value)
    want, want_kept = apply_dropout_noise(x, noise, backend=backend)
    assert torch.equal(out.view(torch.uint8), (x * noise).view(torch.uint8))  # NaN and -0 bits
    assert torch.equal(out.view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(kept, want_kept)


@pytest.mark.parametrize("shape", [(300, 64), (4099, 3), (5, 7)])
def test_the_product_written_over_the_draws_is_the_same(shape, backend):
    """`out=draws`: MaskedDropout's way of not holding a third tensor of x's size."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(5))
    draws = torch.empty_like(x).bernoulli_(0.6, generator=torch.Generator().manual_seed(6))
    kept_value = torch.ones(()).div_(0.6).item()
    want, want_kept = apply_dropout_noise(x, draws, backend=backend, scale=kept_value)
    out, kept = apply_dropout_noise(x, draws, backend=backend, scale=kept_value, out=draws)
    assert out.data_ptr() == draws.data_ptr()
    assert torch.equal(out.view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(kept, want_kept)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_other_dtypes_run_the_torch_ops_with_the_same_values(dtype):
    x = torch.randn(64, 96, dtype=dtype)
    noise = noise_like(x, 0.3, seed=3)
    out, kept = apply_dropout_noise(x, noise)
    assert out.dtype == dtype and torch.equal(out, x * noise)
    value = torch.ones((), dtype=dtype).div_(0.7).item()  # the kept noise, in that dtype
    assert torch.equal(dropout_noise_backward(x, kept, value), x * noise)


def test_bad_input_says_what_to_pass():
    with pytest.raises(ValueError, match=r"a noise tensor of its shape and dtype"):
        apply_dropout_noise(torch.zeros(4, 3), torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"'out' needs x's shape \(4, 3\)"):
        apply_dropout_noise(torch.zeros(4, 3), torch.zeros(4, 3), out=torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"kept must be the 2 uint8 bytes"):
        dropout_noise_backward(torch.zeros(16), torch.zeros(3, dtype=torch.uint8), 2.0)
