"""`squared_distance` (TransR's score) and `translation_scores` (its two scores and penalty) against
the plain ops."""

import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.ops import squared_distance, translation_scores

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


# -- translation_scores: TransR's two scores and its penalty's squared norms in one op -------------


def make_five(dtype: torch.dtype = torch.float32, rows: int = 120):
    gen = torch.Generator().manual_seed(5)
    return [torch.randn(rows, 64, generator=gen, dtype=dtype).requires_grad_() for _ in range(5)]


def plain_terms(h, r, t, nh, nt):
    return plain(h, r, t), plain(nh, r, nt), sum(x.pow(2).sum() for x in (h, r, t, nh, nt))


def mixed(terms):
    """One [rows] output from the three, each with its own weight (for the probed gradients)."""
    true_score, corrupted_score, norms = terms
    return true_score - 0.7 * corrupted_score + 0.01 * norms


def translation_op(config):
    return lambda *five: mixed(translation_scores(*five, with_norms=True, config=config))


@pytest.mark.parametrize("bits", ALL_BITS)
def test_translation_scores_forward_is_the_plain_formulas_bit_for_bit(bits):
    five = make_five()
    config = CompressionConfig(bits=bits)
    for got, want in zip(
        translation_scores(*five, with_norms=True, config=config), plain_terms(*five), strict=True
    ):
        assert torch.equal(got, want)
    *scores, norms = translation_scores(*five, with_norms=False, config=config)
    assert norms is None and torch.equal(scores[1], plain(five[3], five[1], five[4]))


def test_translation_scores_backward_matches_finite_differences_and_plain_ops(
    exact_functions, grad_tools
):
    five = make_five(torch.float64)
    small = [t.detach()[:4, :5].requires_grad_() for t in five]
    assert torch.autograd.gradcheck(translation_op(exact_functions), small)
    probe = torch.randn(120, dtype=torch.float64)
    ours = grad_tools.gradients(translation_op(exact_functions), five, probe)
    reference = grad_tools.gradients(lambda *f: mixed(plain_terms(*f)), five, probe)
    for x, y in zip(ours, reference, strict=True):
        torch.testing.assert_close(x, y)
    # a score whose gradient is not needed contributes nothing (and nothing fails)
    true_score, _, _ = translation_scores(*five, with_norms=True, config=exact_functions)
    (grad_tail,) = torch.autograd.grad(true_score.sum(), five[2])
    torch.testing.assert_close(grad_tail, -2 * (five[0] + five[1] - five[2]).detach())


def test_translation_scores_gradients_at_2_bits_are_unbiased(grad_tools):
    five = make_five()
    probe = torch.randn(120, generator=torch.Generator().manual_seed(6))
    exact = grad_tools.gradients(lambda *f: mixed(plain_terms(*f)), five, probe)
    samples = grad_tools.draws(translation_op(CompressionConfig(bits=2)), five, probe, range(64))
    for position in range(5):
        ratio = grad_tools.bias_ratio([s[position] for s in samples], exact[position])
        assert ratio < 2.0, (position, ratio)


def test_translation_scores_store_each_input_once_shared_with_other_ops():
    h, _, t, nh, nt = make_five()
    table = torch.nn.Parameter(torch.randn(10, 64))
    r = table.index_select(0, torch.randint(0, 10, (120,)))  # rows of a parameter: indices only
    config = CompressionConfig(bits=2)
    with ActivationMeter() as meter:
        terms = translation_scores(h, r, t, nh, nt, with_norms=True, config=config)
        also = squared_distance(h, r, t, config=config)  # the same tensors: nothing stored again
    one_tensor = 120 * 64 / 4 + 120 * 4
    assert all(x.requires_grad for x in (*terms, also))
    assert meter.total_bytes == 4 * one_tensor + 120


def test_translation_scores_need_five_tensors_of_one_shape():
    five = make_five()
    with pytest.raises(ValueError, match=r"five \[rows, dim\] tensors of one shape"):
        translation_scores(*five[:4], five[4][:3], with_norms=True, config=CompressionConfig())
