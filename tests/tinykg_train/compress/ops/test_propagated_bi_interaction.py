"""`propagated_bi_interaction` (a whole-graph KGAT layer as one op): the two ops' forward bit for
bit, their gradients up to the rounding of what is stored, the same numbers in one block or many,
and the neighbor vectors never made whole."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.row_readers import decode_whole, record_row_readers
from tinykg_train.compress import CompressionConfig, compress_saved_tensors, ops
from tinykg_train.compress.ops import propagated_bi_interaction
from tinykg_train.models.layers import _Propagation
from tinykg_train.models.sparse import CSRGraph

NODES, WIDTH, OUT, SLOPE = 700, 16, 8, 0.2
SMALL_BLOCKS = 4096  # bytes: blocks of the 128-row matrix-product floor, six of them


def graph_case(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(NODES, (2, 6 * NODES), generator=generator)
    graph = CSRGraph(edge_index, NODES)
    attention = torch.rand(graph.num_entries, generator=generator)
    ego = torch.randn(NODES, WIDTH, generator=generator)
    weights = [
        torch.randn(OUT, WIDTH, generator=generator) / 4,
        torch.randn(OUT, generator=generator) / 4,
        torch.randn(OUT, WIDTH, generator=generator) / 4,
        torch.randn(OUT, generator=generator) / 4,
    ]
    return graph, attention, ego, weights


def plain(ego, graph, attention, weights):
    """The two ops: the propagation, then the aggregator, in plain autograd."""
    neighbors = graph(ego, attention)
    summed = F.linear(ego + neighbors, weights[0], weights[1])
    product = F.linear(ego * neighbors, weights[2], weights[3])
    return F.leaky_relu(summed, SLOPE) + F.leaky_relu(product, SLOPE)


def fused_gradients(bits: int, block_bytes, seed: int = 0, normalized: bool = False):
    """The op's output and gradients; with `normalized` its ego is an L2 normalization's input,
    stored as KGAT's second and later layers store it (`codec.Rescaled`)."""
    graph, attention, ego, weights = graph_case()
    leaves = [ego.requires_grad_(), *(w.requires_grad_() for w in weights)]
    config = CompressionConfig(bits=bits)
    torch.manual_seed(seed)
    with compress_saved_tensors(config):
        activation = ego * 1  # not a leaf: a leaf would be kept as it is, not compressed
        if normalized:
            ops.l2_normalize(activation, dim=-1, config=config)
        out = propagated_bi_interaction(
            activation, _Propagation(graph, attention), *weights, SLOPE, config=config,
            block_bytes=block_bytes,
        )  # fmt: skip
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(9))
    out.backward(grad)
    return out.detach(), [leaf.grad for leaf in leaves], grad


def exact_gradients(grad):
    graph, attention, ego, weights = graph_case()
    leaves = [ego.requires_grad_(), *(w.requires_grad_() for w in weights)]
    out = plain(ego, graph, attention, weights)
    out.backward(grad)
    return out.detach(), [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("block_bytes", [None, SMALL_BLOCKS])
def test_the_forward_is_the_two_ops_bit_for_bit_and_the_gradients_near_the_exact_ones(
    block_bytes,
):
    out, grads, grad = fused_gradients(8, block_bytes)
    exact_out, exact = exact_gradients(grad)
    assert torch.equal(out, exact_out)
    for name, got, want in zip(("ego", "W1", "b1", "W2", "b2"), grads, exact, strict=True):
        error = float((got - want).norm() / want.norm())
        if name.startswith("b"):  # from the exact masks alone
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), name
        else:  # through the 8-bit ego vectors: close, not equal
            assert 0 < error < 0.05, (name, error)


def test_uncompressed_it_is_the_plain_ops_autograd():
    out, grads, grad = fused_gradients(32, None)
    exact_out, exact = exact_gradients(grad)
    assert torch.equal(out, exact_out)
    for got, want in zip(grads, exact, strict=True):
        assert torch.equal(got, want)


def test_many_blocks_give_one_block_s_numbers_to_float_rounding():
    """The same stored ego vectors (same draws): the blocks' sums differ by rounding only."""
    one_out, one, _ = fused_gradients(2, None)
    many_out, many, _ = fused_gradients(2, SMALL_BLOCKS)
    assert torch.equal(one_out, many_out)
    for a, b in zip(one, many, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_neighbor_vectors_are_only_ever_made_a_block_at_a_time(monkeypatch):
    requests = []
    rows, gathered = _Propagation.rows, _Propagation.gathered_rows

    def recording_rows(self, x, start, stop):
        requests.append(("forward" if x.requires_grad else "backward", stop - start))
        return rows(self, x, start, stop)

    def recording_gathered(self, rows_of, start, stop, positions=None):
        requests.append(("backward, gathered", stop - start))
        return gathered(self, rows_of, start, stop, positions)

    def refused(self, x):
        raise AssertionError("the whole neighbor tensor was made")

    monkeypatch.setattr(_Propagation, "rows", recording_rows)
    monkeypatch.setattr(_Propagation, "gathered_rows", recording_gathered)
    monkeypatch.setattr(_Propagation, "__call__", refused)
    fused_gradients(2, SMALL_BLOCKS)
    kinds = {kind for kind, _ in requests}
    assert kinds == {"forward", "backward, gathered"}  # several blocks: the ego never decoded whole
    assert len(requests) >= 8 and max(size for _, size in requests) < NODES
    assert sum(size for _, size in requests) == 2 * NODES  # each row once each way


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("bits", [2, 8])
def test_reading_the_ego_by_rows_gives_the_whole_decode_s_gradients_bit_for_bit(
    bits, normalized, monkeypatch
):
    """Several blocks: each reads the stored ego's rows it needs (`take_rows`, of a `Compressed`
    or of a normalization's `Rescaled`), the same bits as decoding it whole first."""
    readers = record_row_readers(monkeypatch)
    by_rows_out, by_rows, _ = fused_gradients(bits, SMALL_BLOCKS, normalized=normalized)
    assert readers == [("Rescaled" if normalized else "Compressed", True)]
    decode_whole(monkeypatch)
    whole_out, whole, _ = fused_gradients(bits, SMALL_BLOCKS, normalized=normalized)
    assert torch.equal(by_rows_out, whole_out)
    for a, b in zip(by_rows, whole, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("normalized", [False, True])
def test_reading_the_ego_by_rows_holds_no_whole_decoded_copy(normalized, monkeypatch):
    """The backward's peak falls by about one decoded `[nodes, width]` float32 tensor, for a
    stored ego as it is and for one a normalization offered (KGAT's later layers)."""
    from tinykg_train.memory import allocation_peak

    nodes, width = 20_000, 64
    generator = torch.Generator().manual_seed(1)
    graph = CSRGraph(torch.randint(nodes, (2, 4 * nodes), generator=generator), nodes)
    attention = torch.rand(graph.num_entries, generator=generator)
    weights = [torch.randn(width, width, generator=generator) / 8, torch.zeros(width)] * 2
    config = CompressionConfig(bits=2)
    peaks = {}
    for reader in ("by rows", "whole"):
        if reader == "whole":
            decode_whole(monkeypatch)
        ego = torch.randn(nodes, width, generator=generator, requires_grad=True)
        with compress_saved_tensors(config):
            activation = ego * 1  # not a leaf: stored compressed
            if normalized:
                ops.l2_normalize(activation, dim=-1, config=config)
            out = propagated_bi_interaction(
                activation, _Propagation(graph, attention), *weights, SLOPE, config=config,
                block_bytes=1 << 20,
            )  # fmt: skip
        grad = torch.randn_like(out)
        with allocation_peak(torch.device("cpu")) as window:  # the op's backward alone
            torch.autograd.grad(out, [activation], grad)
        peaks[reader] = window.peak_bytes
    decoded = nodes * width * 4
    assert peaks["whole"] - peaks["by rows"] > 0.8 * decoded, peaks


def test_ego_vectors_that_are_not_a_matrix_are_refused():
    graph, attention, ego, weights = graph_case()
    with pytest.raises(ValueError, match=r"needs ego vectors \[nodes, width\]"):
        propagated_bi_interaction(
            ego.unsqueeze(0), _Propagation(graph, attention), *weights,
            config=CompressionConfig(bits=2),
        )  # fmt: skip
