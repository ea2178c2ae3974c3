"""Whole-graph work in blocks of rows gives the numbers of the code before blocks, bit for bit.

The reference is the earlier code itself (the bi-interaction backward on whole tensors after the
propagation as its own op, KGIN's relational mean over all edges at once), patched back in. Against
it: the losses and every parameter's gradient after a step, and the weights after a few Adam steps,
with the default blocks (one block on this tiny graph) and with blocks of a few rows (dozens of
blocks). One exception, by design: a compressed KGAT layer in several blocks
(`ops.propagated_bi_interaction`) sums its weight gradients and A^T's product block by block, so
there it matches to float32 rounding.
"""

from __future__ import annotations

import contextlib
import functools
import importlib

import pytest
import torch

from tests.row_readers import decode_whole, record_row_readers
from tinykg_kernels.leaky_pair import leaky_relu_pair_backward
from tinykg_train.compress import compress_saved_tensors
from tinykg_train.compress.codec import compress, decompress
from tinykg_train.compress.ops.indices import compact_index
from tinykg_train.compress.saving import load, save
from tinykg_train.models import build_model, relational

bi_module = importlib.import_module("tinykg_train.compress.ops.bi_interaction")  # not the op
propagated_module = importlib.import_module("tinykg_train.compress.ops.propagated_bi_interaction")
TINY_BLOCK = 2048  # bytes: blocks of ~128 rows (the matrix-product floor), ~40 edges


def previous_bi_interaction_backward(ctx, grad):
    """CompressedBiInteraction.backward before blocks (whole tensors, neighbors recomputed whole)."""
    ego, neighbors, sum_positive, product_positive, sum_weight, product_weight = load(
        ctx, decode=False
    )
    ego = decompress(ego)
    if ctx.neighbors_of is None:
        neighbors = decompress(neighbors)
    else:
        with torch.no_grad():
            neighbors = ctx.neighbors_of(ego)
    width = ego.shape[-1]
    ego, neighbors = ego.reshape(-1, width), neighbors.reshape(-1, width)
    needs = ctx.needs_input_grad
    grad = grad.reshape(-1, grad.shape[-1])
    grad_sum, grad_product = leaky_relu_pair_backward(
        grad, sum_positive.packed, product_positive.packed, ctx.slope
    )
    grad_sum_weight = grad_sum_bias = grad_product_weight = grad_product_bias = None
    if needs[2] or needs[4]:
        inputs = torch.add(ego, neighbors)
        if needs[2]:
            grad_sum_weight = grad_sum.t().matmul(inputs)
        if needs[4]:
            grad_product_weight = grad_product.t().matmul(torch.mul(ego, neighbors, out=inputs))
    if needs[3]:
        grad_sum_bias = grad_sum.sum(dim=0)
    if needs[5]:
        grad_product_bias = grad_product.sum(dim=0)
    grad_ego = grad_neighbors = None
    if needs[0] or needs[1]:
        through_sum = grad_sum.matmul(sum_weight)
        through_product = grad_product.matmul(product_weight)
        if needs[1]:
            grad_neighbors = torch.addcmul(through_sum, through_product, ego).view(ctx.shape)
        if needs[0]:
            grad_ego = through_sum.addcmul_(through_product, neighbors).view(ctx.shape)
    return (grad_ego, grad_neighbors, grad_sum_weight, grad_sum_bias, grad_product_weight,
            grad_product_bias, None, None, None, None, None)  # fmt: skip


class PreviousRelationalMean(torch.autograd.Function):
    """relational.RelationalMean before edge blocks (all edges' messages at once)."""

    @staticmethod
    def forward(ctx, x, relation_weight, source, target, relation, num_nodes, config, block_bytes):
        x_needs, weight_needs = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        save(
            ctx,
            compress(x, config) if weight_needs else None,
            relation_weight if x_needs else None,
            compact_index(source, x.shape[0]),
            compact_index(target, num_nodes),
            compact_index(relation, relation_weight.shape[0]),
        )
        ctx.shapes = (x.shape, relation_weight.shape, num_nodes)
        messages = x.index_select(0, source) * relation_weight.index_select(0, relation)
        out = x.new_zeros((num_nodes, x.shape[1])).index_add_(0, target, messages)
        degree = torch.bincount(target, minlength=num_nodes).clamp_(min=1).to(out.dtype)
        return out / degree.unsqueeze(1)

    @staticmethod
    def backward(ctx, grad):
        x, relation_weight, source, target, relation = load(ctx)
        source, target, relation = (i.long() for i in (source, target, relation))
        x_shape, weight_shape, num_nodes = ctx.shapes
        degree = torch.bincount(target, minlength=num_nodes).clamp_(min=1).to(grad.dtype)
        edge_grad = (grad / degree.unsqueeze(1)).index_select(0, target)
        grad_x = grad_weight = None
        if ctx.needs_input_grad[0]:
            messages = edge_grad * relation_weight.index_select(0, relation)
            grad_x = grad.new_zeros(x_shape).index_add_(0, source, messages)
        if ctx.needs_input_grad[1]:
            messages = edge_grad * x.index_select(0, source)
            grad_weight = grad.new_zeros(weight_shape).index_add_(0, relation, messages)
        return grad_x, grad_weight, None, None, None, None, None, None


def two_op_bi_interaction(ego, propagation, *weights, config, block_bytes=None):
    """`ops.propagated_bi_interaction` as it was: the propagation as its own op, then
    `bi_interaction` recomputing the neighbors in backward."""
    return bi_module.bi_interaction(
        ego, propagation(ego), *weights, config=config, neighbors_of=propagation,
        block_bytes=block_bytes,
    )  # fmt: skip


@contextlib.contextmanager
def previous_code(monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(
            importlib.import_module("tinykg_train.compress.ops"),
            "propagated_bi_interaction",
            two_op_bi_interaction,
        )
        patch.setattr(
            bi_module.CompressedBiInteraction,
            "backward",
            staticmethod(previous_bi_interaction_backward),
        )
        patch.setattr(relational, "RelationalMean", PreviousRelationalMean)
        yield


def set_blocks(model, block_bytes: int | None) -> None:
    for module in model.modules():
        if hasattr(module, "block_bytes"):
            module.block_bytes = block_bytes


def run(dataset, make_config, model_name: str, bits: int, steps: int, blocks: int | None):
    """Loss and gradients of a first step, losses of the later ones, and the final weights."""
    torch.manual_seed(0)
    model = build_model(model_name, dataset, make_config(model=model_name, bits=bits, n_layers=3))
    set_blocks(model, blocks)
    model.train()
    model.on_epoch_start(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1)
    losses, first_grads = [], None
    for _ in range(steps):
        users = torch.randint(dataset.n_users, (64,), generator=generator)
        pos, neg = (torch.randint(dataset.n_items, (64,), generator=generator) for _ in range(2))
        optimizer.zero_grad(set_to_none=True)
        hooks = compress_saved_tensors(model.compression) if bits < 32 else contextlib.nullcontext()
        with hooks:
            loss = model.loss(users, pos, neg)
            loss.backward()
        losses.append(loss.detach())
        if first_grads is None:
            first_grads = {
                n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
            }
        optimizer.step()
    return losses, first_grads, {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("model_name", ["kgat", "kgin"])
@pytest.mark.parametrize("bits", [32, 2])
def test_blocked_training_is_the_previous_code_bit_for_bit(
    tiny_dataset, make_config, monkeypatch, model_name, bits
):
    with previous_code(monkeypatch):
        reference = run(tiny_dataset, make_config, model_name, bits, steps=3, blocks=None)
    for blocks in (None, TINY_BLOCK):
        losses, grads, weights = run(tiny_dataset, make_config, model_name, bits, 3, blocks)
        same_weights = same = torch.equal
        if model_name == "kgat" and bits < 32 and blocks is not None:
            same = functools.partial(torch.allclose, rtol=1e-4, atol=1e-7)
            # Adam divides each gradient element by its own running scale, so an element whose
            # gradient is near zero moves up to lr per step whatever its size: a sum's order can
            # move such a weight by far more than 1e-4 of itself (8e-6 seen, lr 0.01)
            same_weights = functools.partial(torch.allclose, rtol=1e-4, atol=1e-4)
        assert same(losses[0], reference[0][0]), blocks
        assert grads.keys() == reference[1].keys()
        for name, grad in grads.items():
            assert same(grad, reference[1][name]), (blocks, name)
        assert all(same(a, b) for a, b in zip(losses, reference[0], strict=True)), blocks
        for name, weight in weights.items():
            assert same_weights(weight, reference[2][name]), (blocks, name)


def test_tiny_blocks_really_cut_the_graph_into_many(tiny_dataset, make_config, monkeypatch):
    """The blocked runs above are not one block in disguise."""
    calls = []
    spans = bi_module.spans

    def counting(*args, **kwargs):
        pieces = list(spans(*args, **kwargs))
        calls.append(len(pieces))
        return iter(pieces)

    monkeypatch.setattr(bi_module, "spans", counting)
    monkeypatch.setattr(propagated_module, "spans", counting)
    run(tiny_dataset, make_config, "kgat", 2, steps=1, blocks=TINY_BLOCK)
    assert calls and min(calls) >= 4, calls


@pytest.mark.parametrize("bits", [32, 2])
@pytest.mark.parametrize("blocks", [None, TINY_BLOCK])
def test_kgat_scoring_in_blocks_is_the_whole_forward_bit_for_bit(
    tiny_dataset, make_config, monkeypatch, bits, blocks
):
    """`propagate()` without gradient (scoring: each layer's aggregator a block of rows at a time,
    `ops.bi_interaction_rows`) gives the training forward's values."""
    torch.manual_seed(0)
    model = build_model("kgat", tiny_dataset, make_config(model="kgat", bits=bits, n_layers=3))
    model.eval()
    with torch.enable_grad():
        expected = [part.detach() for part in model.propagate()]
    set_blocks(model, blocks)
    calls = []
    rows = bi_module.bi_interaction_rows

    def counting(*args, **kwargs):
        calls.append(kwargs.get("block_bytes"))
        return rows(*args, **kwargs)

    monkeypatch.setattr(bi_module, "bi_interaction_rows", counting)
    monkeypatch.setattr(
        importlib.import_module("tinykg_train.compress.ops"), "bi_interaction_rows", counting
    )
    with torch.no_grad():
        got = model.propagate()
    assert calls == [blocks] * 3
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


def test_kgat_s_later_layers_read_their_stored_input_by_rows_with_the_whole_decode_s_bits(
    tiny_dataset, make_config, monkeypatch
):
    """In several blocks, the second and third layers' backward read their stored input (the
    previous layer's normalized output, a `Rescaled`) a block's rows at a time, never decoded
    whole; the first layer's input is the table itself. The step's numbers are those of decoding
    it whole."""
    readers = record_row_readers(monkeypatch)
    by_rows = run(tiny_dataset, make_config, "kgat", 2, steps=2, blocks=TINY_BLOCK)
    assert sorted(set(readers)) == [("Rescaled", True), ("Tensor", False)], readers
    assert readers.count(("Rescaled", True)) == 2 * readers.count(("Tensor", False))
    decode_whole(monkeypatch)
    whole = run(tiny_dataset, make_config, "kgat", 2, steps=2, blocks=TINY_BLOCK)
    assert all(torch.equal(a, b) for a, b in zip(by_rows[0], whole[0], strict=True))
    for name, grad in by_rows[1].items():
        assert torch.equal(grad, whole[1][name]), name
    for name, weight in by_rows[2].items():
        assert torch.equal(weight, whole[2][name]), name
