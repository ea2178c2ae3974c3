"""`ops.tanh`, `ops.softmax` and `ops.sum_of_squares`: torch's forward bit for bit; torch's
gradient bit for bit when nothing is rounded; compressed saves and unbiased 2-bit gradients."""

from __future__ import annotations

import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig, ops

KEEP_ALL = dict(min_numel=10**9)  # compression on, every tensor small enough to be kept as it is


def tanh(x, config):
    return ops.tanh(x, config=config)


def softmax(x, config):
    return ops.softmax(x, -1, config=config)


def sum_of_squares(x, config):
    return ops.sum_of_squares(x, config=config)


PLAIN = {
    tanh: torch.tanh,
    softmax: lambda x: torch.softmax(x, -1),
    sum_of_squares: lambda x: x.pow(2).sum(),
}
OPS = list(PLAIN)


def inputs(seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(64, 8, 16, generator=gen) * 2).requires_grad_()


def gradient(fn, x, weights) -> torch.Tensor:
    x.grad = None
    out = fn(x)
    (out * weights).sum().backward()
    return x.grad.clone()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("bits", [32, 8, 2, 1])
def test_forward_is_torchs_bit_for_bit(op, bits):
    x = inputs()
    assert torch.equal(op(x, CompressionConfig(bits=bits)), PLAIN[op](x))


@pytest.mark.parametrize("op", OPS)
def test_gradient_is_torchs_bit_for_bit_when_nothing_is_rounded(op):
    x = inputs()
    weights = torch.randn(PLAIN[op](x).shape, generator=torch.Generator().manual_seed(1))
    expected = gradient(PLAIN[op], x, weights)
    got = gradient(lambda t: op(t, CompressionConfig(bits=2, **KEEP_ALL)), x, weights)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("op", OPS)
def test_saves_its_tensor_compressed(op):
    x = inputs()
    with ActivationMeter() as exact:
        kept = op(x * 1.0, CompressionConfig(bits=32))  # the graph, and what it saved, alive
    with ActivationMeter() as two_bits:
        kept = [kept, op(x * 1.0, CompressionConfig(bits=2))]
    assert 0 < two_bits.total_bytes < exact.total_bytes / 8


@pytest.mark.parametrize("op", OPS)
def test_2_bit_gradients_average_to_the_exact_one(op):
    x = inputs()
    weights = torch.randn(PLAIN[op](x).shape, generator=torch.Generator().manual_seed(1))
    exact = gradient(PLAIN[op], x, weights)
    torch.manual_seed(0)
    draws = torch.stack(
        [gradient(lambda t: op(t, CompressionConfig(bits=2)), x, weights) for _ in range(32)]
    )
    single = float((draws - exact).flatten(1).norm(dim=1).mean())
    averaged = float((draws.mean(0) - exact).norm())
    assert single > 0
    assert averaged < 0.35 * single, (single, averaged)


def test_sum_of_squares_keeps_rows_of_a_parameter_as_indices_exactly():
    table = torch.nn.Parameter(torch.randn(50, 16))
    index = torch.tensor([3, 7, 7, 41, 0] * 60)
    with ActivationMeter() as meter:
        out = ops.sum_of_squares(table.index_select(0, index), config=CompressionConfig(bits=2))
    out.backward()
    # index_select's own int64 index and the op's narrowed copy; no float rows (19,200 bytes)
    assert meter.total_bytes <= index.numel() * (8 + 1)
    reference = table.detach().clone().requires_grad_()
    reference.index_select(0, index).pow(2).sum().backward()
    assert torch.equal(table.grad, reference.grad)
