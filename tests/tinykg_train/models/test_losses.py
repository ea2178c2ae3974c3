"""The shared losses: BPR against its textbook form, the L2 penalty, compressed saves."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tinykg_train.compress import CompressionConfig, compress_saved_tensors
from tinykg_train.models.losses import bpr_loss, bpr_loss_of_groups, dot_scores, l2_penalty

EXACT = CompressionConfig(bits=32)  # l2_penalty's op is then x.pow(2).sum()


def test_bpr_loss_is_minus_log_sigmoid_of_the_margin():
    torch.manual_seed(0)
    u, i, j = (torch.randn(64, 8) * 3 for _ in range(3))  # large margins: softplus stays stable
    expected = -F.logsigmoid((u * i).sum(1) - (u * j).sum(1)).mean()
    torch.testing.assert_close(bpr_loss(u, i, j, config=CompressionConfig()), expected)


def test_bpr_loss_of_groups_adds_the_groups_margins():
    torch.manual_seed(0)
    u, i, j = (torch.randn(64, 12) * 3 for _ in range(3))
    config = CompressionConfig()
    one = bpr_loss_of_groups([(u, i, j)], config=config)
    assert torch.equal(one, bpr_loss(u, i, j, config=config))  # one group: bit for bit
    groups = [(u[:, :5], i[:, :5], j[:, :5]), (u[:, 5:], i[:, 5:], j[:, 5:])]
    torch.testing.assert_close(bpr_loss_of_groups(groups, config=config), one)


def test_a_group_of_parameter_rows_is_scored_exactly_beside_a_quantized_one():
    """Rows of a table in their own group are saved as their indices: the table's gradient through
    them is the exact one, while the computed group beside them is rounded at 2 bits."""
    torch.manual_seed(0)
    table = torch.nn.Parameter(torch.randn(50, 8))
    computed = torch.randn(50, 8, requires_grad=True)
    index = torch.randint(0, 50, (3, 64))
    config = CompressionConfig(bits=2, score_bits=2)

    def gradients(compressed: bool, concatenated: bool = False):
        table.grad = computed.grad = None
        hooks = (
            compress_saved_tensors(config)
            if compressed
            else torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
        )
        with hooks:
            rows = [table.index_select(0, ix) for ix in index]
            others = [(computed * 1.0).index_select(0, ix) for ix in index]
            groups = [tuple(rows), tuple(others)]
            if concatenated:  # one group: the table's rows quantized with the rest
                groups = [tuple(torch.cat(pair, dim=1) for pair in zip(rows, others, strict=True))]
            loss = bpr_loss_of_groups(groups, config=config if compressed else EXACT)
            loss.backward()
        return table.grad.clone(), computed.grad.clone()

    exact_table, exact_computed = gradients(compressed=False)
    table_grad, computed_grad = gradients(compressed=True)
    # the table's rows were read exactly; their partners (the computed group) are not part of
    # the table's gradient: d margin / d u_rows = pos_rows - neg_rows, all rows of the table
    torch.testing.assert_close(table_grad, exact_table, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(computed_grad, exact_computed, rtol=1e-2, atol=1e-4)
    concatenated_table, _ = gradients(compressed=True, concatenated=True)
    assert not torch.allclose(concatenated_table, exact_table, rtol=1e-2, atol=1e-4)


def test_l2_penalty_is_half_the_squared_norms_per_row():
    a, b = torch.ones(4, 3), 2 * torch.ones(4, 3)
    assert float(l2_penalty([a, b], config=EXACT)) == (12 + 48) / (2 * 4)


def test_dot_scores_forward_is_exact_under_compression():
    torch.manual_seed(0)
    a = torch.randn(128, 32, requires_grad=True)
    b = torch.randn(128, 32, requires_grad=True)
    config = CompressionConfig(bits=2)
    with compress_saved_tensors(config):
        compressed = dot_scores(a, b, config=config)
    assert torch.equal(compressed, (a * b).sum(-1))


def dot_scores_gradient(config: CompressionConfig, seed: int) -> torch.Tensor:
    """d/da of sum(dot_scores(a, b)) (= b as saved) inside an INT2 `compress_saved_tensors`."""
    torch.manual_seed(seed)
    a = torch.randn(256, 64, requires_grad=True)
    b = torch.randn(256, 64)
    with compress_saved_tensors(CompressionConfig(bits=2)):
        dot_scores(a, b, config=config).sum().backward()
    return a.grad - b


def test_scored_embeddings_are_saved_at_score_bits():
    errors = {
        score_bits: dot_scores_gradient(CompressionConfig(bits=2, score_bits=score_bits), 0)
        .abs()
        .max()
        for score_bits in (2, 8)
    }
    # 2 bits: errors up to a level spacing (about a third of the row range); 8 bits: 1/255 of it
    assert errors[2] > 0.5 and errors[8] < 0.05
    # exact: past the INT2 hooks too (a plain product there would be saved at 2 bits)
    assert torch.equal(
        dot_scores_gradient(CompressionConfig(bits=2, score_bits=32), 0), torch.zeros(256, 64)
    )


def test_l2_penalty_squares_the_chunks_of_one_gather_as_one_saved_tensor():
    """Chunks tiling one gather are squared as the gather: one saved tensor, not three, and the
    same penalty and gradient as the chunks one by one (up to the order of the sums)."""
    torch.manual_seed(0)
    table = torch.nn.Parameter(torch.randn(40, 8))
    index = torch.randint(0, 40, (30,))
    rows = table.index_select(0, index)
    chunks = list(rows.chunk(3))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        penalty = l2_penalty(chunks, config=EXACT)
    assert sum(1 for t in saved if t.is_floating_point()) == 1
    expected = sum(c.detach().pow(2).sum() for c in chunks) / 20
    torch.testing.assert_close(penalty, expected)
    penalty.backward()
    expected_grad = torch.zeros(40, 8).index_add_(0, index, rows.detach() / 10)  # d/drow = row/10
    torch.testing.assert_close(table.grad, expected_grad)
    # chunks of different gathers, or not tiling theirs, are squared one by one
    other = table.index_select(0, torch.arange(10))
    torch.testing.assert_close(
        l2_penalty([chunks[0], other, chunks[2]], config=EXACT),
        sum(t.detach().pow(2).sum() for t in (chunks[0], other, chunks[2])) / 20,
    )
    torch.testing.assert_close(
        l2_penalty(chunks[:2], config=EXACT), sum(t.detach().pow(2).sum() for t in chunks[:2]) / 20
    )
