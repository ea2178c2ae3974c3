"""Where table-sized gradients appear in a whole-graph step's backward: last, not first.

Autograd runs the ready node made last first. A gather or slice of a whole-graph tensor gets a
gradient of that tensor's full size, held from when its node runs until the tensor's gradient is
complete; made after the propagation, it ran first and was held through all of the propagation's
backward (one more `[nodes, dim]` at the step's peak). These tests record the order in which the
nodes of one step's backward run.
"""

from __future__ import annotations

import pytest
import torch

from kg_data import BPRBatches
from tinykg_train.compress import compress_saved_tensors
from tinykg_train.models import build_model


def backward_order(model, batch) -> list[tuple[str, object]]:
    """(node name, node) of every autograd node of `model.loss(*batch)`, in the order they ran."""
    with compress_saved_tensors(model.compression, model):
        loss = model.loss(*batch)
    ran: list[tuple[str, object]] = []
    seen, pending = set(), [loss.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        node.register_hook(lambda _in, _out, node=node: ran.append((node.name(), node)))
        pending.extend(next_node for next_node, _ in node.next_functions)
    loss.backward()
    return ran


def reads_table(node, table: torch.Tensor) -> bool:
    """Whether `node` passes its gradient straight to `table`'s accumulator."""
    return any(getattr(nxt, "variable", None) is table for nxt, _ in node.next_functions)


def table_gathers(model, ran) -> list[int]:
    """Positions in `ran` of the gathers that read a parameter (a table) directly."""
    tables = [p for p in model.parameters() if p.dim() == 2]
    return [
        i
        for i, (name, node) in enumerate(ran)
        if name == "IndexSelectBackward0" and any(reads_table(node, t) for t in tables)
    ]


def one_step_order(name, bits, dataset, make_config):
    torch.manual_seed(0)
    model = build_model(name, dataset, make_config(model=name, bits=bits, l2=1e-4))
    model.on_epoch_start(0)
    batch = next(iter(BPRBatches(dataset, 64, seed=0).epoch(0)))
    return model, backward_order(model, batch)


@pytest.mark.parametrize("name", ["kgat", "kgin", "lightgcn"])
@pytest.mark.parametrize("bits", [32, 2])
def test_the_table_rows_gradients_come_after_the_propagation(name, bits, tiny_dataset, make_config):
    model, ran = one_step_order(name, bits, tiny_dataset, make_config)
    names = [n for n, _ in ran]
    gathers = table_gathers(model, ran)
    propagation = [i for i, n in enumerate(names) if "CSRMatmul" in n or "BiInteraction" in n]
    assert gathers and propagation
    assert min(gathers) > max(propagation), names


@pytest.mark.parametrize("bits", [32, 2])
def test_kgat_gathers_the_batch_from_each_layer_not_from_all_users_and_items(
    bits, tiny_dataset, make_config
):
    """Each layer's rows of the batch are gathered from its output right after it (the gather's
    whole-graph gradient made just before that layer's backward); no representations of every
    user and item (whose two dense gradients were held through the whole backward)."""
    model, ran = one_step_order("kgat", bits, tiny_dataset, make_config)
    names = [n for n, _ in ran]
    assert not {"EmbeddingBackward", "SliceBackward0"} & set(names), names
    layer_backward = [i for i, n in enumerate(names) if "CSRMatmul" in n]  # one per layer
    layer_gathers = [
        i
        for i, n in enumerate(names)
        if n == "IndexSelectBackward0" and i not in table_gathers(model, ran)
    ]
    assert len(layer_backward) == len(layer_gathers) == len(model.layers), names
    # the last layer's gather first, each just before its layer's backward
    for gather, layer in zip(layer_gathers, layer_backward, strict=True):
        assert gather < layer, names
    assert all(a < b for a, b in zip(layer_backward[:-1], layer_gathers[1:], strict=True)), names


@pytest.mark.parametrize("bits", [32, 2])
def test_kgat_batch_vectors_are_the_rows_of_its_propagation(bits, tiny_dataset, make_config):
    from tinykg_train.models.base import EmbeddingRecommender

    torch.manual_seed(0)
    model = build_model("kgat", tiny_dataset, make_config(model="kgat", bits=bits, dropout=0.0))
    model.on_epoch_start(0)
    users, pos, neg = next(iter(BPRBatches(tiny_dataset, 64, seed=0).epoch(0)))
    pos[:8] = neg[:8]  # items both positive and negative: their gradients sum
    with torch.no_grad():
        gathered = model.batch_vectors(users, pos, neg)
        from_all = EmbeddingRecommender.batch_vectors(model, users, pos, neg)
    for a, b in zip(gathered, from_all, strict=True):
        assert torch.equal(a, b)

    def table_gradient(batch_vectors):
        model.zero_grad()
        torch.manual_seed(1)
        with compress_saved_tensors(model.compression, model):
            u, p, n = batch_vectors(model, users, pos, neg)
            loss = (u * (p - 2 * n)).sum()
        loss.backward()
        return model.node_embedding.grad.clone()

    torch.testing.assert_close(
        table_gradient(type(model).batch_vectors),
        table_gradient(EmbeddingRecommender.batch_vectors),
        rtol=1e-5 if bits == 32 else 0.3,
        atol=1e-6 if bits == 32 else 0.05,
    )
