import pytest
import torch
import torch.nn.functional as F

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.ops import linear

ALL_BITS = (32, 8, 4, 2, 1)


def make_inputs(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(96, 48, generator=gen, dtype=dtype).requires_grad_()
    weight = (torch.randn(24, 48, generator=gen, dtype=dtype) / 7).requires_grad_()
    bias = torch.randn(24, generator=gen, dtype=dtype).requires_grad_()
    return x, weight, bias


@pytest.mark.parametrize("bits", ALL_BITS)
def test_forward_equals_f_linear_at_every_bit_width(bits):
    x, weight, bias = make_inputs()
    out = linear(x, weight, bias, config=CompressionConfig(bits=bits))
    assert torch.equal(out, F.linear(x, weight, bias))
    assert out.requires_grad


def test_function_backward_matches_finite_differences_and_plain_op(exact_functions, grad_tools):
    x, weight, bias = (t.detach().double().requires_grad_() for t in make_inputs())
    x3 = x.detach()[:30].reshape(5, 6, 48).requires_grad_()  # leading dims are flattened
    op = lambda x, w, b: linear(x, w, b, config=exact_functions)  # noqa: E731
    assert torch.autograd.gradcheck(op, (x3[:2, :3, :8].contiguous(), weight[:4, :8], bias[:4]))
    probe = torch.randn(5, 6, 24, dtype=torch.float64)
    ours = grad_tools.gradients(op, (x3, weight, bias), probe)
    plain = grad_tools.gradients(F.linear, (x3, weight, bias), probe)
    for a, b in zip(ours, plain, strict=True):
        torch.testing.assert_close(a, b)


def test_gradients_at_8_bits_within_one_percent(grad_tools):
    x, weight, bias = make_inputs()
    probe = F.linear(x, weight, bias).detach()  # loss 0.5 * ||y||^2: a gradient with signal
    exact = grad_tools.gradients(F.linear, (x, weight, bias), probe)
    torch.manual_seed(1)
    approx = grad_tools.gradients(
        lambda *t: linear(*t, config=CompressionConfig(bits=8)), (x, weight, bias), probe
    )
    for a, e in zip(approx, exact, strict=True):
        assert grad_tools.relative_error(a, e) < 0.01


def weight_gradient_draws(grad_tools, config, draws=64):
    x, weight, _ = make_inputs()
    x = x.detach()  # only the weight gradient reads the saved input
    probe = torch.randn(96, 24, generator=torch.Generator().manual_seed(3))
    (exact,) = grad_tools.gradients(F.linear, (x, weight), probe)
    op = lambda x, w: linear(x, w, config=config)  # noqa: E731
    samples = grad_tools.draws(op, (x, weight), probe, range(draws))
    return [s[0] for s in samples], exact


def test_weight_gradient_at_2_bits_is_unbiased_and_round_to_nearest_is_not(grad_tools):
    ratios = {
        stochastic: grad_tools.bias_ratio(
            *weight_gradient_draws(grad_tools, CompressionConfig(bits=2, stochastic=stochastic))
        )
        for stochastic in (True, False)
    }
    assert ratios[True] < 2.0, ratios
    assert ratios[False] > 10.0, ratios


def test_projected_input_keeps_the_weight_gradient_unbiased_and_saves_fewer_bytes(grad_tools):
    config = CompressionConfig(bits=2, projection_ratio=2)
    samples, exact = weight_gradient_draws(grad_tools, config, draws=128)
    assert grad_tools.bias_ratio(samples, exact) < 2.0
    x = torch.randn(96, 128)
    weight = torch.nn.Parameter(torch.randn(24, 128))
    held = {}
    for ratio in (None, 2):
        with ActivationMeter() as meter:
            out = linear(x, weight, config=CompressionConfig(bits=2, projection_ratio=ratio))
        held[ratio] = meter.total_bytes
        assert out.requires_grad
    assert held[2] < 0.6 * held[None]


def test_saves_the_input_compressed_and_only_what_gradients_need():
    x, weight, bias = make_inputs()
    x = x.detach()
    model = torch.nn.Module()
    model.weight, model.bias = (
        torch.nn.Parameter(weight.detach()),
        torch.nn.Parameter(bias.detach()),
    )
    held = {}
    for bits in (32, 2):
        with ActivationMeter(model) as meter:
            out = linear(x, model.weight, model.bias, config=CompressionConfig(bits=bits))
        held[bits] = meter.total_bytes
    assert held[32] == x.numel() * 4  # the input; parameters are not activations
    assert held[32] / held[2] >= 10
    with ActivationMeter(model) as meter:  # no weight gradient: nothing to keep of the input
        out = linear(
            x.requires_grad_(), model.weight.detach(), None, config=CompressionConfig(bits=2)
        )
    assert meter.total_bytes == 0 and out.requires_grad
