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
    # one per layer: its propagation (FP32), or the compressed op that includes it
    layer_backward = [
        i for i, n in enumerate(names) if "CSRMatmul" in n or "PropagatedBiInteraction" in n
    ]
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

    def table_gradient(model, batch_vectors):
        model.zero_grad()
        torch.manual_seed(1)
        with compress_saved_tensors(model.compression, model):
            u, p, n = batch_vectors(model, users, pos, neg)
            loss = (u * (p - 2 * n)).sum()
        loss.backward()
        return model.node_embedding.grad.clone()

    gathered = table_gradient(model, type(model).batch_vectors)
    from_all = table_gradient(model, EmbeddingRecommender.batch_vectors)
    if bits == 32:
        torch.testing.assert_close(gathered, from_all, rtol=1e-5, atol=1e-6)
        return
    # compressed, the two save different tensors (the batch's normalized rows, not every row's),
    # so their rounding draws differ: each is as close to the exact gradient as the other
    exact_model = build_model("kgat", tiny_dataset, make_config(model="kgat", bits=32, dropout=0.0))
    exact_model.load_state_dict(model.state_dict())
    exact_model.on_epoch_start(0)
    exact = table_gradient(exact_model, EmbeddingRecommender.batch_vectors)

    def error(gradient):
        return float((gradient - exact).norm() / exact.norm())

    assert 0 < error(gathered) < 1.3 * error(from_all), (error(gathered), error(from_all))


def test_kgat_s_next_layer_stores_its_input_as_the_normalization_would_have(
    tiny_dataset, make_config
):
    """Only the batch's rows are normalized with gradient; the whole output is still stored for
    the next layer as the whole normalization kept it (normalized at `normalize_bits`, and the
    norms), not quantized again at `bits`."""
    torch.manual_seed(0)
    model = build_model("kgat", tiny_dataset, make_config(model="kgat", bits=2, n_layers=3))
    model.on_epoch_start(0)
    users, pos, neg = next(iter(BPRBatches(tiny_dataset, 64, seed=0).epoch(0)))
    with compress_saved_tensors(model.compression, model):
        u, p, n = model.batch_vectors(users, pos, neg)
    stored, pending, seen = [], [u.grad_fn], set()
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "PropagatedBiInteractionBackward":
            stored.append(node.tinykg_layout[0][0])
        pending.extend(next_node for next_node, _ in node.next_functions)
    kinds = sorted(kind.__name__ for kind in stored if kind is not None)
    # the first layer keeps the table as it is (no compressed form); the next two the offered one
    assert kinds == ["Rescaled", "Rescaled"], kinds
