"""relational_mean: forward and gradients equal the unfused ops; it saves [N, dim], not [E, dim]."""

from __future__ import annotations

import contextlib

import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig, compress_saved_tensors, ops
from tinykg_train.models.relational import relational_mean


def unfused(x, weight, edge_index, relation, num_nodes):
    source, target = edge_index.long()
    messages = x[source] * weight[relation]
    out = torch.zeros(num_nodes, x.shape[1]).index_add(0, target, messages)
    return out / torch.bincount(target, minlength=num_nodes).clamp(min=1)[:, None]


@pytest.fixture
def graph():
    torch.manual_seed(0)
    n, edges = 40, 600
    edge_index = torch.randint(0, n, (2, edges), dtype=torch.int32)
    edge_index[1, :5] = 0  # a few heads share many edges; some nodes get none
    return edge_index, torch.randint(0, 6, (edges,)), n


def test_forward_and_gradients_equal_the_unfused_ops(graph):
    edge_index, relation, n = graph
    x = torch.randn(n, 16, requires_grad=True)
    weight = torch.randn(6, 16, requires_grad=True)
    out = relational_mean(x, weight, edge_index, relation, n, config=CompressionConfig())
    x_ref, w_ref = x.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    expected = unfused(x_ref, w_ref, edge_index, relation, n)
    assert torch.equal(out, expected)
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(weight.grad, w_ref.grad)


def test_int2_saves_far_less_than_the_unfused_ops(graph):
    """The unfused ops keep two [E, dim] products; the fused op keeps x [N, dim] and indices."""
    edge_index, relation, n = graph
    x = torch.randn(n, 64, requires_grad=True)
    weight = torch.randn(6, 64, requires_grad=True)
    config = CompressionConfig(bits=2)
    with compress_saved_tensors(config), ActivationMeter() as fused:
        out = relational_mean(x, weight, edge_index, relation, n, config=config)
    with compress_saved_tensors(config), ActivationMeter() as per_edge:
        source, target = edge_index
        messages = ops.mul(
            ops.embedding(x, source, config=config),
            ops.embedding(weight, relation, config=config),
            config=config,
        )
        held = torch.zeros(n, 64).index_add(0, target, messages)
    del held
    assert 3 * fused.total_bytes < per_edge.total_bytes, (fused.total_bytes, per_edge.total_bytes)
    exact = unfused(x, weight, edge_index, relation, n)
    assert torch.equal(out, exact)
    out.sum().backward()
    weight_grad = weight.grad.clone()
    weight.grad = None
    exact.sum().backward()
    cosine = torch.nn.functional.cosine_similarity(weight_grad.flatten(), weight.grad.flatten(), 0)
    assert cosine > 0.8


@pytest.mark.parametrize("bits", [32, 2])
def test_edge_blocks_give_the_same_bits_as_one_block(graph, bits):
    """Blocks of a few edges (the graph's 600 cut into ~40) against all edges at once: the forward
    and both gradients bit for bit (index_add_ adds into each row in edge order either way)."""
    edge_index, relation, n = graph
    torch.manual_seed(1)
    x0, w0, grad = torch.randn(n, 16), torch.randn(6, 16), torch.randn(n, 16)
    results = []
    for block_bytes in (None, 16 * 3 * 4 * 15):  # default (one block here), 15 edges a block
        x, weight = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        config = CompressionConfig(bits=bits)
        with compress_saved_tensors(config) if bits < 32 else contextlib.nullcontext():
            torch.manual_seed(2)  # the same quantization noise
            out = relational_mean(
                x, weight, edge_index, relation, n, config=config, block_bytes=block_bytes
            )
        out.backward(grad)
        results.append((out.detach(), x.grad, weight.grad))
    for whole, blocked in zip(*results, strict=True):
        assert torch.equal(whole, blocked)
