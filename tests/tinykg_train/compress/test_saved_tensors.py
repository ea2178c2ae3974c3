import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from tinykg_train.compress import (
    ActivationMeter,
    CompressionConfig,
    compress_saved_tensors,
    ops,
    uncompressed,
)

INT2, INT8 = CompressionConfig(bits=2), CompressionConfig(bits=8)


class ScaledMLP(nn.Module):
    """Linear -> ReLU -> (x * buffer) -> Linear: parameters, a float buffer and activations."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.first, self.second = nn.Linear(32, 64), nn.Linear(64, 8)
        self.register_buffer("gain", torch.rand(64, generator=gen) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(F.relu(self.first(x)) * self.gain)


def inputs() -> torch.Tensor:
    return torch.randn(256, 32, generator=torch.Generator().manual_seed(1)).requires_grad_()


def test_forward_is_unchanged_and_gradients_at_8_bits_within_one_percent():
    model, x = ScaledMLP(), inputs()
    plain = model(x)
    exact = torch.autograd.grad(plain.pow(2).sum(), [x, *model.parameters()])
    torch.manual_seed(0)
    with compress_saved_tensors(INT8):
        out = model(x)
    assert torch.equal(out, plain)
    approx = torch.autograd.grad(out.pow(2).sum(), [x, *model.parameters()])
    for a, e in zip(approx, exact, strict=True):
        assert (a - e).norm() / e.norm() < 0.01


def test_parameters_and_buffers_are_kept_exact_with_or_without_the_model():
    """The input gradient reads only the weights, the buffer and the sign of the ReLU output (kept
    exact beside its 2-bit codes): it is bit-for-bit the plain one, so none of them was rounded."""
    model, x = ScaledMLP(), inputs()
    probe = torch.randn(256, 8)
    (exact,) = torch.autograd.grad((model(x) * probe).sum(), x)
    for given in (model, None):
        with compress_saved_tensors(INT2, model=given):
            out = model(x)
        (grad,) = torch.autograd.grad((out * probe).sum(), x)
        assert torch.equal(grad, exact)


def test_with_a_model_no_module_outside_it_gets_the_pre_hook():
    """Given the model, only its modules are hooked (nothing process-wide), and only while the
    block runs; without one, a process-wide hook lives exactly as long as the block."""
    from torch.nn.modules import module as registry

    model, outside, x = ScaledMLP(), nn.Linear(32, 32), inputs()
    global_hooks = len(registry._global_forward_pre_hooks)
    with compress_saved_tensors(INT2, model=model):
        assert len(registry._global_forward_pre_hooks) == global_hooks
        assert all(len(m._forward_pre_hooks) == 1 for m in model.modules())
        assert not outside._forward_pre_hooks
        model(outside(x)).sum().backward()
    assert not any(m._forward_pre_hooks for m in (*model.modules(), outside))
    with compress_saved_tensors(INT2):
        assert len(registry._global_forward_pre_hooks) == global_hooks + 1
    assert len(registry._global_forward_pre_hooks) == global_hooks


def test_weight_gradient_at_2_bits_is_unbiased_and_round_to_nearest_is_not(grad_tools):
    weight = (torch.randn(16, 64, generator=torch.Generator().manual_seed(2)) / 8).requires_grad_()
    x = torch.randn(128, 64, generator=torch.Generator().manual_seed(3))
    probe = torch.randn(128, 16, generator=torch.Generator().manual_seed(4))
    (exact,) = grad_tools.gradients(F.linear, (x, weight), probe)
    ratios = {}
    for stochastic in (True, False):
        config = CompressionConfig(bits=2, stochastic=stochastic)

        def op(x, w, c=config):
            with compress_saved_tensors(c):
                return F.linear(x, w)

        samples = grad_tools.draws(op, (x, weight), probe, range(64))
        ratios[stochastic] = grad_tools.bias_ratio([s[0] for s in samples], exact)
    assert ratios[True] < 2.0 and ratios[False] > 10.0, ratios


def test_integers_kept_bools_bit_packed_floats_compressed():
    x = torch.randn(1000, 64, requires_grad=True)
    index = torch.randint(0, 1000, (4096,))
    mask = torch.rand(1000, 64) > 0.5
    with compress_saved_tensors(INT2):
        with ActivationMeter() as ints:
            gathered = x.index_select(0, index)  # saves the int64 index
        with ActivationMeter() as bools:
            chosen = torch.where(mask, x, 0.0)  # saves the bool condition
        with ActivationMeter() as floats:
            squared = x.detach().requires_grad_() * x.detach()  # saves the float factor
    assert ints.total_bytes == index.numel() * 8
    assert bools.total_bytes == mask.numel() // 8
    assert floats.total_bytes == 1000 * (64 // 4 + 4)
    assert gathered.requires_grad and chosen.requires_grad and squared.requires_grad


def test_a_tensor_saved_twice_is_stored_once():
    a, b = torch.randn(500, 64, requires_grad=True), torch.randn(500, 64, requires_grad=True)
    with compress_saved_tensors(CompressionConfig(bits=2, scheme="uniform")):  # steps of range / 3
        with ActivationMeter() as same:
            square = a * a  # mul saves both operands: here one tensor
        with ActivationMeter() as different:
            product = a * b
    assert same.total_bytes * 2 == different.total_bytes
    (grad,) = torch.autograd.grad(square.sum(), a)
    assert (grad - 2 * a).abs().max() < 2 * (a.amax(1) - a.amin(1)).max() / 3  # within one step
    assert product.requires_grad


def test_ops_that_compress_themselves_pass_through_unchanged():
    x = torch.randn(300, 64)
    weight = nn.Parameter(torch.randn(16, 64))
    held = []
    for hooks in (False, True):
        hooked = compress_saved_tensors(INT2) if hooks else contextlib.nullcontext()
        with hooked, ActivationMeter() as meter:
            out = ops.relu(ops.linear(x, weight, config=INT2), config=INT2)
        held.append(meter.total_bytes)
        assert out.requires_grad
    assert held[0] == held[1] == 300 * (64 // 4 + 4) + 300 * 16 // 8


def test_bits_32_compresses_nothing():
    model, x = ScaledMLP(), inputs()
    with ActivationMeter(model) as plain:
        out1 = model(x)
    with compress_saved_tensors(CompressionConfig()), ActivationMeter(model) as hooked:
        out2 = model(x)
    assert plain.total_bytes == hooked.total_bytes > 0
    assert torch.equal(out1, out2)


def softplus_margin_grad(x: torch.Tensor, exact: bool) -> tuple[torch.Tensor, int]:
    """d softplus(x).mean() / dx with x saved inside an INT2 block (`exact`: in `uncompressed()`)."""
    x = x.clone().requires_grad_(True)
    with compress_saved_tensors(CompressionConfig(bits=2)), ActivationMeter() as meter:
        margin = x * 1.0  # a non-leaf, as a loss's score margins are
        with uncompressed() if exact else contextlib.nullcontext():
            loss = F.softplus(margin).mean()
        held = meter.total_bytes
    loss.backward()
    return x.grad, held


def test_uncompressed_keeps_a_nonlinear_loss_input_exact_and_counted():
    torch.manual_seed(0)
    x = torch.randn(4096) * 4
    expected = torch.sigmoid(x) / x.numel()
    grad, held = softplus_margin_grad(x, exact=True)
    torch.testing.assert_close(grad, expected)
    assert held >= x.numel() * 4, "the exact copy is still counted by the meter"
    # control: saved at 2 bits, softplus's gradient (the sigmoid of the saved input) is far off and biased
    mean_error = torch.stack(
        [softplus_margin_grad(x, exact=False)[0] - expected for _ in range(32)]
    ).mean(0)
    assert mean_error.abs().max() * x.numel() > 0.02
