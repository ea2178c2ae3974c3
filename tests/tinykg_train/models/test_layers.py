"""The shared layers against their formulas written with plain torch ops."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tinykg_train.compress import CompressionConfig
from tinykg_train.models.layers import BiInteractionLayer, RelationalPathLayer, SumAggregator
from tinykg_train.models.sparse import CSRGraph

CONFIG = CompressionConfig()


def test_bi_interaction_layer_is_the_kgat_formula():
    torch.manual_seed(0)
    n, dim = 20, 8
    edge_index = torch.randint(0, n, (2, 60))
    attention = torch.rand(60)
    graph = CSRGraph(edge_index, n)
    layer = BiInteractionLayer(dim, 4, dropout=0.5, negative_slope=0.2, compression=CONFIG).eval()
    ego = torch.randn(n, dim)
    out, normalised = layer(ego, graph, graph.values(attention))

    adjacency = torch.zeros(n, n).index_put_(
        (edge_index[1], edge_index[0]), attention, accumulate=True
    )
    side = adjacency @ ego
    expected = F.leaky_relu(layer.sum_linear(ego + side), 0.2) + F.leaky_relu(
        layer.product_linear(ego * side), 0.2
    )
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(normalised, F.normalize(expected, dim=1))


def test_bi_interaction_layer_drops_messages_while_training():
    torch.manual_seed(0)
    graph = CSRGraph(torch.randint(0, 10, (2, 30)), 10)
    layer = BiInteractionLayer(8, 8, dropout=0.5, negative_slope=0.2, compression=CONFIG)
    out, _ = layer(torch.randn(10, 8), graph, torch.ones(graph.num_entries))
    assert 0.3 < float((out == 0).float().mean()) < 0.7


def test_sum_aggregator_is_the_kgcn_formula():
    torch.manual_seed(0)
    self_vectors, neighbors = torch.randn(5, 3, 8), torch.randn(5, 3, 4, 8)
    weights = torch.softmax(torch.randn(5, 3, 4), dim=-1)
    for last, activation in ((False, torch.relu), (True, torch.tanh)):
        aggregator = SumAggregator(8, dropout=0.5, last=last, compression=CONFIG).eval()
        expected = activation(
            aggregator.linear(self_vectors + (weights.unsqueeze(-1) * neighbors).sum(-2))
        )
        torch.testing.assert_close(aggregator(self_vectors, neighbors, weights), expected)


def test_relational_mean_averages_relation_times_neighbor():
    entity, relation_embedding = torch.randn(4, 3), torch.randn(2, 3)
    edge_index = torch.tensor([[1, 2, 3], [0, 0, 1]])  # 1 -> 0 (r0), 2 -> 0 (r1), 3 -> 1 (r1)
    relation = torch.tensor([0, 1, 1])
    layer = RelationalPathLayer(n_users=1, dropout=0.0, compression=CONFIG)
    out = layer.relational_mean(entity, relation_embedding, edge_index, relation)
    r = relation_embedding
    torch.testing.assert_close(out[0], (r[0] * entity[1] + r[1] * entity[2]) / 2)
    torch.testing.assert_close(out[1], r[1] * entity[3])
    assert torch.equal(out[2:], torch.zeros(2, 3))  # no edges in: zero


def test_bi_interaction_layer_refuses_a_backward_after_the_attention_changed():
    """Its backward recomputes the neighbors with the attention: a refresh in between would give
    a wrong gradient, so it raises instead."""
    torch.manual_seed(0)
    graph = CSRGraph(torch.randint(0, 30, (2, 90)), 30)
    layer = BiInteractionLayer(
        64, 8, dropout=0.0, negative_slope=0.2, compression=CompressionConfig(bits=2)
    )
    attention = torch.rand(graph.num_entries)
    ego = torch.randn(30, 64, requires_grad=True)
    out, _ = layer(ego, graph, attention)
    out.sum().backward()  # fine
    assert ego.grad is not None
    out, _ = layer(ego, graph, attention)
    attention.mul_(2.0)
    with pytest.raises(RuntimeError, match="attention changed between a forward and its backward"):
        out.sum().backward()


@pytest.mark.parametrize(
    ("edges", "block_bytes", "stores"),
    [
        (30 * 40, None, True),  # degree 40: the quantized neighbors cost less than a recompute
        (30 * 10, None, False),  # degree 10: recomputed from the stored ego vectors
        (30 * 40, 30 * 64 * 4 - 1, False),  # a blocked backward: recomputed a block at a time
    ],
)
def test_a_dense_graph_s_layer_stores_its_neighbors_instead_of_recomputing_them(
    edges, block_bytes, stores, monkeypatch
):
    from tinykg_train.compress import ops

    torch.manual_seed(0)
    edge_index = torch.stack([torch.arange(edges) % 30, torch.arange(edges) // (edges // 30)])
    graph = CSRGraph(edge_index, 30)
    layer = BiInteractionLayer(
        64, 8, dropout=0.0, negative_slope=0.2, compression=CompressionConfig(bits=2)
    )
    layer.block_bytes = block_bytes
    seen, real, fused = [], ops.bi_interaction, ops.propagated_bi_interaction
    monkeypatch.setattr(
        ops, "bi_interaction", lambda *a, **kw: seen.append(kw["neighbors_of"]) or real(*a, **kw)
    )
    monkeypatch.setattr(
        ops, "propagated_bi_interaction", lambda *a, **kw: seen.append("fused") or fused(*a, **kw)
    )
    attention = torch.rand(graph.num_entries)
    ego = torch.randn(30, 64, requires_grad=True)
    out, _ = layer(ego, graph, attention)
    # stored: the two-op form without a recompute; else propagation and aggregator in one op
    assert seen == ([None] if stores else ["fused"])
    # either way the gradient is the compressed op's: close to the exact one, not equal
    out.sum().backward()
    exact_ego = ego.detach().clone().requires_grad_(True)
    plain = BiInteractionLayer(64, 8, dropout=0.0, negative_slope=0.2, compression=CONFIG)
    plain.load_state_dict(layer.state_dict())
    plain(exact_ego, graph, attention)[0].sum().backward()
    error = (ego.grad - exact_ego.grad).norm() / exact_ego.grad.norm()
    assert 0 < float(error) < 0.5
