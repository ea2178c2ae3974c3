import pytest
import torch
import torch.nn.functional as F

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.ops import l2_normalize, mul

ALL_BITS = (32, 8, 4, 2, 1)


def make_rows(dtype: torch.dtype = torch.float32, zero_row: bool = True) -> torch.Tensor:
    x = torch.randn(120, 40, generator=torch.Generator().manual_seed(0), dtype=dtype)
    if zero_row:
        x[3] = 0.0  # a row whose norm is clamped to eps (its gradient is g / eps)
    return x.requires_grad_()


@pytest.mark.parametrize("bits", ALL_BITS)
@pytest.mark.parametrize("dim", [-1, 0])
def test_forward_equals_f_normalize_at_every_bit_width(bits, dim):
    x = make_rows()
    out = l2_normalize(x, dim, config=CompressionConfig(bits=bits))
    assert torch.equal(out, F.normalize(x, p=2.0, dim=dim))


@pytest.mark.parametrize("dim", [-1, 0])
def test_function_backward_matches_finite_differences_and_plain_op(
    exact_functions, grad_tools, dim
):
    x = make_rows(torch.float64)
    op = lambda x: l2_normalize(x, dim, config=exact_functions)  # noqa: E731
    assert torch.autograd.gradcheck(op, (x[4:10, :5].detach().requires_grad_(),))
    probe = torch.randn(120, 40, dtype=torch.float64)
    (ours,) = grad_tools.gradients(op, (x,), probe)
    (plain,) = grad_tools.gradients(lambda x: F.normalize(x, dim=dim), (x,), probe)
    torch.testing.assert_close(ours, plain)
    torch.testing.assert_close(ours[3], probe[3] / 1e-12 if dim == -1 else ours[3])


def test_gradient_at_8_bits_within_one_percent(grad_tools):
    x = make_rows(zero_row=False)
    probe = torch.randn(120, 40, generator=torch.Generator().manual_seed(1))
    (exact,) = grad_tools.gradients(lambda x: F.normalize(x, dim=-1), (x,), probe)
    torch.manual_seed(1)
    (approx,) = grad_tools.gradients(
        lambda x: l2_normalize(x, config=CompressionConfig(bits=8)), (x,), probe
    )
    assert grad_tools.relative_error(approx, exact) < 0.01


def test_gradient_at_2_bits_averages_towards_exact_and_round_to_nearest_does_not(grad_tools):
    """Quadratic in the saved output (y * <g, y>): the mean over draws closes in on the exact
    gradient up to the O(variance) diagonal term; rounding to nearest keeps its whole error."""
    x = make_rows(zero_row=False)
    probe = torch.randn(120, 40, generator=torch.Generator().manual_seed(1))
    (exact,) = grad_tools.gradients(lambda x: F.normalize(x, dim=-1), (x,), probe)
    gains = {}
    for stochastic in (True, False):
        config = CompressionConfig(bits=2, stochastic=stochastic, normalize_bits=2)
        op = lambda x, c=config: l2_normalize(x, config=c)  # noqa: E731
        samples = [s[0] for s in grad_tools.draws(op, (x,), probe, range(64))]
        single = sum(grad_tools.relative_error(s, exact) for s in samples) / len(samples)
        gains[stochastic] = grad_tools.relative_error(torch.stack(samples).mean(0), exact) / single
    assert gains[True] < 0.3, gains
    assert gains[False] > 0.9, gains


def test_saves_compressed_output_and_exact_norms():
    x = make_rows()
    held = {}
    for normalize_bits in (2, 4):
        with ActivationMeter() as meter:
            out = l2_normalize(x, config=CompressionConfig(bits=2, normalize_bits=normalize_bits))
        held[normalize_bits] = meter.total_bytes
    norms = 120 * 4
    assert norms < held[2] < norms + x.numel() * 4 / 8
    # the default: the output at 4 bits, half a byte a value
    assert held[2] + x.numel() / 4 <= held[4] < norms + x.numel() * 4 / 4
    assert out.requires_grad


def test_the_output_saved_at_4_bits_by_default_cuts_the_gradient_error(grad_tools):
    x = make_rows(zero_row=False)
    probe = torch.randn(120, 40, generator=torch.Generator().manual_seed(1))
    (exact,) = grad_tools.gradients(lambda x: F.normalize(x, dim=-1), (x,), probe)
    errors = {}
    for config in (CompressionConfig(bits=2, normalize_bits=2), CompressionConfig(bits=2)):
        op = lambda x, c=config: l2_normalize(x, config=c)  # noqa: E731
        samples = [s[0] for s in grad_tools.draws(op, (x,), probe, range(8))]
        errors[config.normalize_bits] = sum(
            grad_tools.relative_error(s, exact) for s in samples
        ) / len(samples)
    assert errors[4] < 0.35 * errors[2], errors


def test_the_next_op_saving_the_input_reuses_the_stored_output_and_norms(grad_tools):
    """KGAT's next layer saves the normalized input: it costs no bytes of its own, and its gradient
    is as close to exact as from a 4-bit copy of the input."""
    x = make_rows(zero_row=False)
    w = torch.randn(120, 40, generator=torch.Generator().manual_seed(2)).requires_grad_()
    config = CompressionConfig(bits=2)
    held = {}
    for normalize_first in (False, True):
        with ActivationMeter() as meter:
            outputs = [l2_normalize(x, config=config)] if normalize_first else []
            before = meter.total_bytes
            outputs.append(mul(x, w, config=config))
        held[normalize_first] = meter.total_bytes - before
    assert held[True] < 0.55 * held[False], held  # only w's copy is new

    probe = torch.randn(120, 40, generator=torch.Generator().manual_seed(3))
    (exact,) = grad_tools.gradients(lambda w: x.detach() * w, (w,), probe)
    errors = {}
    for normalize_first in (False, True):

        def op(w, first=normalize_first):
            with ActivationMeter():
                out = l2_normalize(x.detach(), config=config) if first else 0
                return mul(x.detach(), w, config=config) + 0 * out

        torch.manual_seed(0)
        (approx,) = grad_tools.gradients(op, (w,), probe)
        errors[normalize_first] = grad_tools.relative_error(approx, exact)
    assert errors[True] < 0.5 * errors[False], errors  # the input as exact as its 4-bit output


@pytest.mark.parametrize("bits", (8, 2))
def test_backward_decodes_a_block_of_rows_at_a_time_to_the_whole_backward_bits(bits, monkeypatch):
    """Rows normalized along their last dim: backward decodes the stored output a block of rows at
    a time (no whole decoded copy), the same bits as one whole pass, the clamped zero row included."""
    from tinykg_train.compress import blocks
    from tinykg_train.compress.codec import Compressed

    x = make_rows()
    probe = torch.randn(120, 40, generator=torch.Generator().manual_seed(2))
    config = CompressionConfig(bits=bits)
    decoded_rows = []
    rows = Compressed.rows
    monkeypatch.setattr(
        Compressed, "rows", lambda self, a, b: decoded_rows.append(b - a) or rows(self, a, b)
    )

    def gradient():
        decoded_rows.clear()
        torch.manual_seed(3)  # the same rounding
        out = l2_normalize(x, config=config)
        (grad,) = torch.autograd.grad((out * probe).sum(), x)
        return grad

    whole = gradient()
    assert sum(decoded_rows) == 0  # one block: decoded whole
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 3 * 40 * 4 * 7)  # blocks of 7 rows
    blocked = gradient()
    assert len(decoded_rows) == 18 and sum(decoded_rows) == 120
    assert torch.equal(whole, blocked)
