import pytest
import torch
import torch.nn.functional as F

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.ops import grouped_linear

ALL_BITS = (32, 8, 4, 2, 1)
COUNTS = [30, 0, 50, 16]  # an empty group included


def make_inputs(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(sum(COUNTS), 48, generator=gen, dtype=dtype).requires_grad_()
    weight = (torch.randn(len(COUNTS), 48, 24, generator=gen, dtype=dtype) / 7).requires_grad_()
    return x, weight


def plain(x: torch.Tensor, weight: torch.Tensor, counts=COUNTS) -> torch.Tensor:
    """One F.linear per group, as KGAT's TransR projection was written."""
    return torch.cat([F.linear(rows, weight[g].T) for g, rows in enumerate(x.split(counts))])


@pytest.mark.parametrize("bits", ALL_BITS)
def test_forward_equals_one_linear_per_group_at_every_bit_width(bits):
    x, weight = make_inputs()
    out = grouped_linear(x, weight, COUNTS, config=CompressionConfig(bits=bits))
    assert torch.equal(out, plain(x, weight)) and out.requires_grad


def test_function_backward_matches_finite_differences_and_plain_ops(exact_functions, grad_tools):
    x, weight = (t.detach().double().requires_grad_() for t in make_inputs())
    op = lambda x, w, counts=COUNTS: grouped_linear(x, w, counts, config=exact_functions)  # noqa: E731
    small = [2, 0, 3]
    assert torch.autograd.gradcheck(
        lambda x, w: op(x, w, small), (x[:5, :4].detach().requires_grad_(), weight[:3, :4, :3])
    )
    probe = torch.randn(sum(COUNTS), 24, dtype=torch.float64)
    ours = grad_tools.gradients(op, (x, weight), probe)
    reference = grad_tools.gradients(plain, (x, weight), probe)
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b)


def test_weight_gradient_at_2_bits_is_unbiased_and_round_to_nearest_is_not(grad_tools):
    x, weight = make_inputs()
    x = x.detach()
    probe = torch.randn(sum(COUNTS), 24, generator=torch.Generator().manual_seed(3))
    (exact,) = grad_tools.gradients(plain, (x, weight), probe)
    ratios = {}
    for stochastic in (True, False):
        config = CompressionConfig(bits=2, stochastic=stochastic)
        op = lambda x, w, c=config: grouped_linear(x, w, COUNTS, config=c)  # noqa: E731
        samples = [s[0] for s in grad_tools.draws(op, (x, weight), probe, range(64))]
        ratios[stochastic] = grad_tools.bias_ratio(samples, exact)
    assert ratios[True] < 2.0, ratios
    assert ratios[False] > 10.0, ratios


def test_saves_the_input_compressed_once():
    x, weight = make_inputs()
    model = torch.nn.Module()
    model.weight = torch.nn.Parameter(weight.detach())
    held = {}
    for bits in (32, 2):
        with ActivationMeter(model) as meter:
            out = grouped_linear(
                x.detach(), model.weight, COUNTS, config=CompressionConfig(bits=bits)
            )
        held[bits] = meter.total_bytes  # what the graph of `out` holds
        assert out.requires_grad
    assert held[32] == x.numel() * 4  # the input; the weights are a parameter
    assert held[32] / held[2] >= 10  # one tensor, row groups of 48 codes + 4 bytes of scale


def test_bad_shapes_say_what_is_expected():
    x, weight = make_inputs()
    config = CompressionConfig(bits=2)
    with pytest.raises(ValueError, match=r"'weight' needs shape \[G, in, out\] with G = .* = 3"):
        grouped_linear(x, weight, [30, 50, 16], config=config)
    with pytest.raises(ValueError, match=r"'counts' must add up to the 96 rows of 'x' \(got 95\)"):
        grouped_linear(x, weight, [30, 0, 50, 15], config=config)
