"""CSRGraph: A @ x and its gradient against a dense reference; duplicates; what it saves."""

from __future__ import annotations

import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig, compress_saved_tensors
from tinykg_train.models.sparse import CSRGraph, _entry_keys


def dense(edge_index, weight, num_nodes, num_sources):
    matrix = torch.zeros(num_nodes, num_sources)
    matrix.index_put_((edge_index[1].long(), edge_index[0].long()), weight, accumulate=True)
    return matrix


@pytest.fixture
def bipartite():
    torch.manual_seed(0)
    edge_index = torch.stack([torch.randint(0, 50, (400,)), torch.randint(0, 30, (400,))])
    edge_index = torch.cat([edge_index, edge_index[:, :20]], dim=1)  # duplicated pairs
    return edge_index, torch.rand(420), 30, 50


def test_matmul_and_gradient_equal_the_dense_product(bipartite):
    edge_index, weight, num_nodes, num_sources = bipartite
    graph = CSRGraph(edge_index, num_nodes, num_sources)
    assert graph.num_entries < 420  # duplicates merged
    x = torch.randn(num_sources, 8, requires_grad=True)
    out = graph(x, graph.values(weight))
    reference_x = x.detach().clone().requires_grad_()
    expected = dense(edge_index, weight, num_nodes, num_sources) @ reference_x
    torch.testing.assert_close(out, expected)
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    torch.testing.assert_close(x.grad, reference_x.grad)


def test_gradient_is_exact_under_int2_compression(bipartite):
    """The graph's entries are graph data, never quantized; nothing of x is saved."""
    edge_index, weight, num_nodes, num_sources = bipartite
    graph = CSRGraph(edge_index, num_nodes, num_sources)
    values = graph.values(weight)
    x = torch.randn(num_sources, 64, requires_grad=True)
    with compress_saved_tensors(CompressionConfig(bits=2)), ActivationMeter() as meter:
        out = graph(x, values)
    assert meter.total_bytes == values.numel() * values.element_size()
    out.backward(torch.ones_like(out))
    expected = dense(edge_index, weight, num_nodes, num_sources).T @ torch.ones(num_nodes, 64)
    torch.testing.assert_close(x.grad, expected)


def test_a_graph_made_without_its_transpose_builds_the_same_one_when_a_backward_asks(bipartite):
    edge_index, weight, num_nodes, num_sources = bipartite
    eager = CSRGraph(edge_index, num_nodes, num_sources)
    lazy = CSRGraph(edge_index, num_nodes, num_sources, transposed=False)
    assert lazy.transposed_order is None and "crow_t" not in dict(lazy.named_buffers())
    x = torch.randn(num_sources, 8, requires_grad=True)
    lazy(x, lazy.values(weight)).sum().backward()
    for built, made in zip(lazy.transposed(), eager.transposed(), strict=True):
        assert torch.equal(built, made) and built.dtype == made.dtype
    assert x.grad is not None


def test_each_edge_s_ends_are_read_back_from_the_csr(bipartite):
    edge_index, _, num_nodes, num_sources = bipartite
    graph = CSRGraph(edge_index, num_nodes, num_sources)
    some = torch.tensor([0, 7, 405, 419])  # 405 and 419 repeat pairs merged into one entry
    for edges, rows in ((None, None), (None, graph.entry_rows()), (some, None)):
        sources, targets = graph.edge_ends(edges, rows)
        wanted = edge_index if edges is None else edge_index[:, edges]
        assert torch.equal(sources.long(), wanted[0]) and torch.equal(targets.long(), wanted[1])
        assert sources.dtype == targets.dtype == graph.col.dtype


@pytest.mark.parametrize("targets", [[2, 2, 5], [0, 0, 1, 9], [4]])
def test_entry_rows_count_every_row_empty_ones_first_last_and_between(targets):
    """Rows without entries before the first entry, between entries and after the last one."""
    sources = list(range(len(targets)))
    graph = CSRGraph(torch.tensor([sources, targets]), 10, len(targets))
    counts = (graph.crow[1:] - graph.crow[:-1]).long()
    wanted = torch.repeat_interleave(torch.arange(10), counts)
    rows = graph.entry_rows()
    assert rows.dtype == graph.col.dtype and torch.equal(rows.long(), wanted)
    assert torch.equal(rows.long(), torch.tensor(sorted(targets)))


def test_rejects_features_of_the_wrong_node_count(bipartite):
    edge_index, weight, num_nodes, num_sources = bipartite
    graph = CSRGraph(edge_index, num_nodes, num_sources)
    with pytest.raises(ValueError, match="'x' needs 50 rows"):
        graph(torch.randn(num_nodes, 4), graph.values(weight))


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_row_blocks_equal_the_whole_products_rows_from_a_host_copy_of_the_row_pointers(
    bipartite, backend, monkeypatch
):
    monkeypatch.setenv("TINYKG_KERNELS_BACKEND", backend)
    edge_index, weight, num_nodes, num_sources = bipartite
    graph = CSRGraph(edge_index, num_nodes, num_sources)
    values, x = graph.values(weight), torch.randn(num_sources, 8)
    whole = dense(edge_index, weight, num_nodes, num_sources) @ x
    for start, stop in [(0, 7), (7, 19), (19, 30), (5, 5)]:
        torch.testing.assert_close(graph.rows(x, values, start, stop), whole[start:stop])
    # bounds come from the host copy (a CUDA graph's would otherwise wait for the device each time)
    assert graph.row_bounds(7, 19) == (int(graph.crow[7]), int(graph.crow[19]))
    assert graph._host_crow.device.type == "cpu" and torch.equal(graph._host_crow, graph.crow)


@pytest.mark.parametrize("backend", ["auto", "torch"])  # native loops and torch's CSR product
def test_gathered_rows_are_the_product_s_rows_bit_for_bit(backend, monkeypatch):
    """A block of rows of `A @ x` from x's rows at the sources it reads, asked for once each."""
    monkeypatch.setenv("TINYKG_KERNELS_BACKEND", backend)
    generator = torch.Generator().manual_seed(3)
    graph = CSRGraph(torch.randint(500, (2, 4000), generator=generator), 500)
    values = torch.rand(graph.num_entries, generator=generator)
    x = torch.randn(500, 64, generator=generator)
    asked = []

    def rows_of(ids):
        asked.append(ids)
        return x[ids]

    positions = torch.empty(500, dtype=graph.col.dtype)
    for start, stop in [(0, 130), (130, 131), (131, 500)]:
        got = graph.gathered_rows(rows_of, values, start, stop, positions)
        assert torch.equal(got, graph.rows(x, values, start, stop))
        ids = asked[-1]
        assert torch.equal(ids, torch.unique(graph.col[graph.crow[start] : graph.crow[stop]]))


def test_entry_keys_are_torch_uniques_keys_and_inverse():
    """The CSR's entries: the distinct (target, source) keys ascending and each edge's position
    among them, as `torch.unique(..., return_inverse=True)` gives them (unsorted edges, repeats)."""
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 50, (2, 3000), generator=gen, dtype=torch.int32)
    keys, slot = _entry_keys(edge_index, num_sources=50)
    expected_keys, expected_slot = torch.unique(
        edge_index[1].long() * 50 + edge_index[0].long(), return_inverse=True
    )
    assert len(keys) < 2500  # repeats were merged
    assert torch.equal(keys, expected_keys)
    assert slot.dtype == torch.int32 and torch.equal(slot.long(), expected_slot)
