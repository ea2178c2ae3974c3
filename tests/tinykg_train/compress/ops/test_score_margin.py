"""`score_margin`: a BPR margin whose backward reads two compressed factors (u, pos - neg)."""

import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig, compress_saved_tensors
from tinykg_train.compress.ops import embedding, mul, score_margin


def plain_margin(u, pos, neg):
    return (u * pos).sum(-1) - (u * neg).sum(-1)


def make_rows(dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(96, 32, generator=gen, dtype=dtype).requires_grad_() for _ in range(3))


@pytest.mark.parametrize("bits", (32, 8, 4, 2, 1))
def test_forward_is_the_plain_margin_bit_for_bit(bits):
    u, pos, neg = make_rows()
    assert torch.equal(
        score_margin(u, pos, neg, config=CompressionConfig(bits=bits)), plain_margin(u, pos, neg)
    )


def test_function_backward_matches_finite_differences_and_plain_op(exact_functions, grad_tools):
    u, pos, neg = make_rows(torch.float64)
    op = lambda u, p, n: score_margin(u, p, n, config=exact_functions)  # noqa: E731
    assert torch.autograd.gradcheck(op, (u[:4, :5], pos[:4, :5], neg[:4, :5]))
    probe = torch.randn(96, dtype=torch.float64)
    ours = grad_tools.gradients(op, (u, pos, neg), probe)
    plain = grad_tools.gradients(plain_margin, (u, pos, neg), probe)
    for x, y in zip(ours, plain, strict=True):
        torch.testing.assert_close(x, y)


def test_gradients_at_2_bits_are_unbiased_and_round_to_nearest_is_not(grad_tools):
    u, pos, neg = make_rows()
    probe = torch.randn(96, generator=torch.Generator().manual_seed(4))
    exact = grad_tools.gradients(plain_margin, (u, pos, neg), probe)
    for stochastic, check in ((True, lambda r: r < 2.0), (False, lambda r: r > 10.0)):
        config = CompressionConfig(bits=2, stochastic=stochastic)
        samples = grad_tools.draws(
            lambda u, p, n, c=config: score_margin(u, p, n, config=c),
            (u, pos, neg),
            probe,
            range(64),
        )
        for position in (0, 1, 2):
            ratio = grad_tools.bias_ratio([s[position] for s in samples], exact[position])
            assert check(ratio), (stochastic, position, ratio)


def test_saves_two_factors_where_two_muls_save_three():
    u, pos, neg = make_rows()
    config = CompressionConfig(bits=8)
    with ActivationMeter() as meter:
        kept = score_margin(u, pos, neg, config=config)
    margin_bytes = meter.total_bytes
    with ActivationMeter() as meter:
        kept = mul(u, pos, config=config).sum(-1) - mul(u, neg, config=config).sum(-1)
    assert 0 < margin_bytes <= meter.total_bytes * 2 / 3
    with ActivationMeter() as meter:  # u needs no gradient: only u is kept, for the items'
        kept = score_margin(u.detach(), pos, neg, config=config)
    assert 0 < meter.total_bytes < margin_bytes
    assert kept.requires_grad


def test_rows_of_a_parameter_give_the_plain_gradients_bit_for_bit():
    """Item rows gathered from a table are kept as their indices: nothing is rounded, and the
    users' gradient is the plain op's `g pos - g neg` (not `g (pos - neg)`, other bits)."""
    gen = torch.Generator().manual_seed(1)
    table = torch.nn.Parameter(torch.randn(50, 16, generator=gen))
    users = torch.randn(64, 16, generator=gen).requires_grad_()
    pos_ids, neg_ids = torch.randint(0, 50, (2, 64), generator=gen)
    probe = torch.randn(64, generator=gen)

    def gradients(config):
        table.grad, users.grad = None, None
        with compress_saved_tensors(config):  # the scope in which rows are known as such
            pos = embedding(table, pos_ids, config=config)
            neg = embedding(table, neg_ids, config=config)
            margin = score_margin(users, pos, neg, config=config)
        (margin * probe).sum().backward()
        return users.grad.clone(), table.grad.clone()

    exact = gradients(CompressionConfig(bits=32))
    # users' gradient reads the item rows (exact); the table's reads users at 8 bits (rounded)
    users_grad, table_grad = gradients(CompressionConfig(bits=8))
    assert torch.equal(users_grad, exact[0])
    assert not torch.equal(table_grad, exact[1])


def test_rows_of_different_shapes_are_refused():
    u, pos, neg = make_rows()
    with pytest.raises(ValueError, match="one shape"):
        score_margin(u, pos[:, :8], neg, config=CompressionConfig(bits=2))
