"""`squared_distance` (TransR's score) against the plain ops."""

import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.ops import squared_distance

ALL_BITS = (32, 8, 4, 2, 1)


def make_inputs(dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(120, 64, generator=gen, dtype=dtype).requires_grad_() for _ in range(3)]


def plain(a, b, c):
    return (a + b - c).pow(2).sum(-1)


def op(config):
    return lambda a, b, c: squared_distance(a, b, c, config=config)


@pytest.mark.parametrize("bits", ALL_BITS)
def test_forward_is_the_plain_formula_bit_for_bit(bits):
    inputs = make_inputs()
    assert torch.equal(op(CompressionConfig(bits=bits))(*inputs), plain(*inputs))


def test_function_backward_matches_finite_differences_and_plain_ops(exact_functions, grad_tools):
    a, b, c = make_inputs(torch.float64)
    small = [t.detach()[:4, :5].requires_grad_() for t in (a, b, c)]
    assert torch.autograd.gradcheck(op(exact_functions), small)
    row = b.detach()[:1].requires_grad_()  # broadcasting: summed back to the row
    probe = torch.randn(120, dtype=torch.float64)
    for args in ((a, b, c), (a, row, c)):
        ours = grad_tools.gradients(op(exact_functions), args, probe)
        reference = grad_tools.gradients(plain, args, probe)
        for x, y in zip(ours, reference, strict=True):
            torch.testing.assert_close(x, y)


def test_gradients_at_2_bits_are_unbiased_and_round_to_nearest_is_not(grad_tools):
    inputs = make_inputs()
    probe = torch.randn(120, generator=torch.Generator().manual_seed(4))
    exact = grad_tools.gradients(plain, inputs, probe)
    for stochastic, check in ((True, lambda r: r < 2.0), (False, lambda r: r > 10.0)):
        config = CompressionConfig(bits=2, stochastic=stochastic)
        samples = grad_tools.draws(op(config), inputs, probe, range(64))
        for position in range(3):
            ratio = grad_tools.bias_ratio([s[position] for s in samples], exact[position])
            assert check(ratio), (stochastic, position, ratio)


def test_saves_its_inputs_not_their_difference():
    a, _, c = make_inputs()
    table = torch.nn.Parameter(torch.randn(10, 64))
    b = table.index_select(0, torch.randint(0, 10, (120,)))  # rows of a parameter: indices only
    config = CompressionConfig(bits=2)
    with ActivationMeter() as meter:
        scores = [op(config)(a, b, c), op(config)(c, b, a)]  # the same tensors: stored once
    one_tensor = 120 * 64 / 4 + 120 * 4  # 2-bit codes, a 16-bit scale and zero per row
    assert all(s.requires_grad for s in scores)
    assert meter.total_bytes == 2 * one_tensor + 120  # and b's indices, one byte each
