import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.ops import mul

ALL_BITS = (32, 8, 4, 2, 1)


def make_factors(dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(80, 40, generator=gen, dtype=dtype).requires_grad_()
    b = (torch.randn(80, 40, generator=gen, dtype=dtype) + 1).requires_grad_()
    return a, b


@pytest.mark.parametrize("bits", ALL_BITS)
def test_forward_is_exact_at_every_bit_width(bits):
    a, b = make_factors()
    assert torch.equal(mul(a, b, config=CompressionConfig(bits=bits)), a * b)


def test_function_backward_matches_finite_differences_and_plain_op(exact_functions, grad_tools):
    a, b = make_factors(torch.float64)
    op = lambda a, b: mul(a, b, config=exact_functions)  # noqa: E731
    assert torch.autograd.gradcheck(op, (a[:4, :5], b[:4, :5]))
    row = b[:1].detach().requires_grad_()  # broadcasting: the gradient is summed back
    assert torch.autograd.gradcheck(op, (a[:4, :5], row[:, :5]))
    probe = torch.randn(80, 40, dtype=torch.float64)
    for args in ((a, b), (a, row)):
        ours = grad_tools.gradients(op, args, probe)
        plain = grad_tools.gradients(torch.mul, args, probe)
        for x, y in zip(ours, plain, strict=True):
            torch.testing.assert_close(x, y)


def test_gradients_at_8_bits_within_one_percent(grad_tools):
    a, b = make_factors()
    probe = (a * b).detach()
    exact = grad_tools.gradients(torch.mul, (a, b), probe)
    torch.manual_seed(1)
    approx = grad_tools.gradients(
        lambda a, b: mul(a, b, config=CompressionConfig(bits=8)), (a, b), probe
    )
    for x, e in zip(approx, exact, strict=True):
        assert grad_tools.relative_error(x, e) < 0.01


def test_gradients_at_2_bits_are_unbiased_and_round_to_nearest_is_not(grad_tools):
    a, b = make_factors()
    probe = torch.randn(80, 40, generator=torch.Generator().manual_seed(4))
    exact = grad_tools.gradients(torch.mul, (a, b), probe)
    for stochastic, check in ((True, lambda r: r < 2.0), (False, lambda r: r > 10.0)):
        config = CompressionConfig(bits=2, stochastic=stochastic)
        samples = grad_tools.draws(
            lambda a, b, c=config: mul(a, b, config=c), (a, b), probe, range(64)
        )
        for position in (0, 1):
            ratio = grad_tools.bias_ratio([s[position] for s in samples], exact[position])
            assert check(ratio), (stochastic, position, ratio)


def test_saves_both_factors_compressed_or_only_the_needed_one():
    a, b = make_factors()
    with ActivationMeter() as meter:
        out = mul(a, b, config=CompressionConfig(bits=2))
    both = meter.total_bytes
    assert out.requires_grad
    assert both < 2 * a.numel() * 4 / 8
    with ActivationMeter() as meter:
        out = mul(a, b.detach(), config=CompressionConfig(bits=2))  # grad a only: keeps b
    assert 0 < meter.total_bytes < both
    assert out.requires_grad
