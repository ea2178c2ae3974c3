"""`recomputed`: the same forward, exact gradients, nothing saved but the inputs, nothing quantized
when it runs again in backward."""

import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig, compress_saved_tensors
from tinykg_train.compress.ops import recomputed
from tinykg_train.models.kgin import intent_independence

ALL_BITS = (32, 8, 4, 2, 1)


def many_intermediates(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Two [60] vectors into [60, 60] matrices, square roots and products (all saved by autograd)."""
    d = ((a[:, None] - b[None, :]).pow(2) + 1e-3).sqrt()
    return (d * d.mean(dim=0)).sum() / (a.pow(2).sum().sqrt() + 1.0)


def inputs():
    gen = torch.Generator().manual_seed(0)
    table = torch.nn.Parameter(torch.randn(2, 60, generator=gen))
    return table, table[0], table[1]


@pytest.mark.parametrize("bits", ALL_BITS)
def test_forward_and_gradients_are_plain_autograd_s_bit_for_bit(bits):
    table, a, b = inputs()
    (plain,) = torch.autograd.grad(many_intermediates(a, b), table)
    config = CompressionConfig(bits=bits)
    with compress_saved_tensors(config):
        out = recomputed(many_intermediates, a, b, config=config)
        (ours,) = torch.autograd.grad(out, table)
    assert torch.equal(out, many_intermediates(a, b).detach())
    assert torch.equal(ours, plain)  # rerun uncompressed: not a rounded gradient


def test_only_the_inputs_are_held_for_backward():
    table, a, b = inputs()
    config = CompressionConfig(bits=2)
    with ActivationMeter() as plain_meter:
        plain = many_intermediates(a, b)  # kept alive: the meter counts what a live graph holds
    with compress_saved_tensors(config), ActivationMeter() as meter:
        out = recomputed(many_intermediates, a, b, config=config)
    assert plain_meter.total_bytes > 60 * 60 * 4  # the [60, 60] intermediates
    assert meter.total_bytes == 2 * 60 * 4  # the two input rows, as they are
    with compress_saved_tensors(config), ActivationMeter() as meter:
        whole = recomputed(lambda t: many_intermediates(t[0], t[1]), table, config=config)
    assert meter.total_bytes == 0  # a parameter: held anyway
    whole.backward()
    assert out.requires_grad and plain.requires_grad and table.grad is not None


def test_an_input_without_gradient_gets_none_and_the_others_theirs():
    table, a, _ = inputs()
    fixed = torch.randn(60)
    config = CompressionConfig(bits=2)
    (ours,) = torch.autograd.grad(recomputed(many_intermediates, a, fixed, config=config), table)
    (plain,) = torch.autograd.grad(many_intermediates(a, fixed), table)
    assert torch.equal(ours, plain)


@pytest.mark.parametrize("kind", ["distance", "cosine"])
def test_kgin_s_independence_penalty_keeps_its_exact_gradient_at_2_bits(kind):
    logits = torch.nn.Parameter(torch.randn(4, 120, generator=torch.Generator().manual_seed(1)))
    (plain,) = torch.autograd.grad(intent_independence(logits, kind), logits)
    config = CompressionConfig(bits=2)
    with compress_saved_tensors(config):
        penalty = recomputed(lambda w: intent_independence(w, kind), logits, config=config)
        (ours,) = torch.autograd.grad(penalty, logits)
    assert torch.equal(ours, plain)
