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


@pytest.mark.parametrize("name", ["kgat", "kgin", "lightgcn"])
@pytest.mark.parametrize("bits", [32, 2])
def test_the_l2_rows_gradient_comes_after_the_propagation(name, bits, tiny_dataset, make_config):
    torch.manual_seed(0)
    model = build_model(name, tiny_dataset, make_config(model=name, bits=bits, l2=1e-4))
    model.on_epoch_start(0)
    batch = next(iter(BPRBatches(tiny_dataset, 64, seed=0).epoch(0)))
    ran = backward_order(model, batch)
    names = [n for n, _ in ran]
    gathers = [i for i, (n, _) in enumerate(ran) if n == "IndexSelectBackward0"]
    propagation = [i for i, n in enumerate(names) if "CSRMatmul" in n or "BiInteraction" in n]
    assert gathers and propagation
    assert min(gathers) > max(propagation), names


@pytest.mark.parametrize("bits", [32, 2])
def test_kgat_table_rows_gradient_comes_after_the_layers_and_in_one_buffer(
    bits, tiny_dataset, make_config
):
    torch.manual_seed(0)
    model = build_model("kgat", tiny_dataset, make_config(model="kgat", bits=bits))
    model.on_epoch_start(0)
    batch = next(iter(BPRBatches(tiny_dataset, 64, seed=0).epoch(0)))
    ran = backward_order(model, batch)
    names = [n for n, _ in ran]
    table = model.node_embedding
    table_rows = [i for i, (n, node) in enumerate(ran) if reads_table(node, table)]
    propagation = [i for i, n in enumerate(names) if "CSRMatmul" in n or "BiInteraction" in n]
    # the layer-0 rows of the final representation: one node, after every layer's backward
    row_ranges = [i for i in table_rows if names[i] == "_RowRangesBackward"]
    assert len(row_ranges) == 1 and row_ranges[0] > max(propagation), names
    assert "SliceBackward0" not in names  # every layer's rows taken by row_ranges
