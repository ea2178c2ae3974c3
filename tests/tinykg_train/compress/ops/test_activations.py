import pytest
import torch
import torch.nn.functional as F

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.ops import dropout, leaky_relu, relu

ALL_BITS = (32, 8, 4, 2, 1)


def make_input(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    x = torch.randn(37, 29, generator=torch.Generator().manual_seed(0), dtype=dtype)
    x[0, :5] = 0.0  # the kink: both ReLUs' gradients at exactly 0 follow torch
    return x.requires_grad_()


CASES = {
    "relu": (lambda x, c: relu(x, config=c), F.relu),
    "leaky_relu": (lambda x, c: leaky_relu(x, 0.2, config=c), lambda x: F.leaky_relu(x, 0.2)),
}


@pytest.mark.parametrize("bits", ALL_BITS)
@pytest.mark.parametrize("name", CASES)
def test_relus_forward_and_gradient_equal_torch_at_every_bit_width(bits, name, grad_tools):
    ours, plain = CASES[name]
    x, config = make_input(), CompressionConfig(bits=bits)
    assert torch.equal(ours(x, config), plain(x))
    probe = torch.randn(37, 29)
    (g_ours,) = grad_tools.gradients(lambda x: ours(x, config), (x,), probe)
    (g_plain,) = grad_tools.gradients(plain, (x,), probe)
    assert torch.equal(g_ours, g_plain)  # a 1-bit mask is exact


@pytest.mark.parametrize("name", CASES)
def test_relu_functions_match_finite_differences(exact_functions, name):
    ours, _ = CASES[name]
    x = torch.randn(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert torch.autograd.gradcheck(lambda x: ours(x, exact_functions), (x.requires_grad_(),))


@pytest.mark.parametrize("bits", ALL_BITS)
def test_dropout_forward_and_mask_are_exactly_f_dropouts(bits, grad_tools):
    x, config = make_input(), CompressionConfig(bits=bits)
    probe = torch.randn(37, 29)
    torch.manual_seed(7)
    out = dropout(x, 0.3, True, config=config)
    torch.manual_seed(7)
    assert torch.equal(out, F.dropout(x, 0.3, True))
    torch.manual_seed(7)
    (g_ours,) = grad_tools.gradients(lambda x: dropout(x, 0.3, True, config=config), (x,), probe)
    torch.manual_seed(7)
    (g_plain,) = grad_tools.gradients(lambda x: F.dropout(x, 0.3, True), (x,), probe)
    assert torch.equal(g_ours, g_plain)
    ones = torch.ones(37, 29, requires_grad=True)  # the gradient shows the forward's own mask
    torch.manual_seed(8)
    kept = dropout(ones, 0.3, True, config=config)
    (grad,) = torch.autograd.grad(kept.sum(), ones)
    assert torch.equal(grad, kept.detach())


def test_dropout_off_in_eval_and_at_p_0_and_everything_dropped_at_p_1():
    x, config = make_input(), CompressionConfig(bits=2)
    assert dropout(x, 0.3, False, config=config) is x
    assert torch.equal(dropout(x, 0.0, True, config=config), x)
    dropped = dropout(x, 1.0, True, config=config)
    assert torch.equal(dropped, torch.zeros_like(x))
    (grad,) = torch.autograd.grad(dropped.sum(), x)
    assert torch.equal(grad, torch.zeros_like(x))
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        dropout(x, 1.5, True, config=config)


@pytest.mark.parametrize(
    "op",
    [
        lambda x, c: relu(x, config=c),
        lambda x, c: leaky_relu(x, config=c),
        lambda x, c: dropout(x, 0.5, True, config=c),
    ],
)
def test_masks_cost_one_bit_per_element(op):
    x = make_input()
    with ActivationMeter() as meter:
        out = op(x, CompressionConfig(bits=2))
    assert meter.total_bytes == (x.numel() + 7) // 8
    assert out.requires_grad


def test_dropout_of_a_large_activation_is_f_dropout_value_for_value(grad_tools):
    """Large enough for the compiled mask codec: the same draws, outputs and gradients."""
    x = torch.randn(300, 64, generator=torch.Generator().manual_seed(2)).requires_grad_()
    probe = torch.randn(300, 64)
    results = []
    for op in (
        lambda x: dropout(x, 0.1, True, config=CompressionConfig(bits=2)),
        lambda x: F.dropout(x, 0.1, True),
    ):
        torch.manual_seed(3)
        out = op(x)
        results.append((out.detach(), torch.autograd.grad((out * probe).sum(), x)[0]))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
