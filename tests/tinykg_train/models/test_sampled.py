"""The models' local path (sampled training): with every neighbor sampled it is the whole-graph
step (loss and every gradient), at 32 bits exactly up to float rounding and at 2 bits on average; it
reads the big tables only through `rows` at the ids `rows_needed` names; with a few neighbors it
trains and holds a fraction of the whole-graph step's activations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kg_data import CKG, BPRBatches
from tinykg_train.compress import ActivationMeter, compress_saved_tensors
from tinykg_train.compress.gathered import gathered_rows
from tinykg_train.errors import ConfigError
from tinykg_train.models import build_model
from tinykg_train.models.rows import ParameterRows
from tinykg_train.scale.receptive_field import ReceptiveField

GRAPH_MODELS = ["kgat", "kgin", "lightgcn"]  # propagate over a sampled subgraph of the CKG
SAMPLED = [*GRAPH_MODELS, "kgcn"]
TABLES = {
    "kgat": ["node_embedding"],
    "kgin": ["user_embedding", "entity_embedding"],
    "lightgcn": ["embedding"],
    "kgcn": ["user_embedding", "entity_embedding"],
}
NO_DROPOUT = {"dropout": 0.0, "extra": {"edge_dropout": 0.0}}


@pytest.fixture(scope="module")
def ckg(tiny_dataset) -> CKG:
    return CKG.from_dataset(tiny_dataset)


def first_batch(dataset, size: int = 128) -> tuple[torch.Tensor, ...]:
    return next(iter(BPRBatches(dataset, size, seed=0).epoch(0)))


def make_model(name, dataset, make_config, **overrides):
    torch.manual_seed(0)
    return build_model(name, dataset, make_config(model=name, **overrides))


def step_graph(model, ckg, batch, fanouts, seed: int = 0):
    users, pos, neg = (t.numpy() for t in batch)
    return model.step_sampler(ckg, fanouts).sample(users, pos, neg, np.random.default_rng(seed))


def table_field(model, batch) -> ReceptiveField:
    """KGCN's trees read from its fixed table, in the layout its sampler draws."""
    _, pos, neg = batch
    entities, relations = model.tree_from_table(torch.cat([pos, neg]))
    return ReceptiveField(tuple(entities), tuple(relations), (model.n_neighbors,) * model.n_hops)


def every_neighbor(name, model, ckg, batch):
    """The step's graph with every neighbor; for KGCN, whose whole-graph step reads fixed trees,
    those trees (its sampler draws fresh ones of the same layout)."""
    if name == "kgcn":
        return table_field(model, batch)
    return step_graph(model, ckg, batch, (-1,) * len(model.layers))


def loss_and_gradients(model, compute) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    with compress_saved_tensors(model.compression):
        loss = compute()
    loss.backward()
    return loss.detach(), {
        name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None
    }


@pytest.mark.parametrize("name", SAMPLED)
def test_every_neighbor_gives_the_whole_graph_loss_and_gradients_at_32_bits(
    name, tiny_dataset, make_config, ckg
):
    model = make_model(name, tiny_dataset, make_config, **NO_DROPOUT)
    batch = first_batch(tiny_dataset)
    graph = every_neighbor(name, model, ckg, batch)
    whole_loss, whole = loss_and_gradients(model, lambda: model.loss(*batch))
    local_loss, local = loss_and_gradients(model, lambda: model.local_loss(*batch, graph))
    torch.testing.assert_close(local_loss, whole_loss, rtol=1e-6, atol=0)
    assert local.keys() == whole.keys() and whole
    for key in whole:
        torch.testing.assert_close(local[key], whole[key], rtol=1e-4, atol=1e-7, msg=key)


@pytest.mark.parametrize("name", SAMPLED)
def test_every_neighbor_at_2_bits_averages_to_the_whole_graph_gradient(
    name, tiny_dataset, make_config, ckg
):
    """The forward stays exact; the 2-bit gradients of the local path are unbiased: the mean of
    16 draws is much closer to the exact whole-graph gradient than one draw is."""
    exact_model = make_model(name, tiny_dataset, make_config, bits=32, **NO_DROPOUT)
    model = make_model(name, tiny_dataset, make_config, bits=2, **NO_DROPOUT)
    batch = first_batch(tiny_dataset)
    graph = every_neighbor(name, model, ckg, batch)
    exact_loss, exact = loss_and_gradients(exact_model, lambda: exact_model.loss(*batch))
    exact = torch.cat([g.flatten() for g in exact.values()])
    torch.manual_seed(3)
    draws = []
    for _ in range(16):
        loss, grads = loss_and_gradients(model, lambda: model.local_loss(*batch, graph))
        torch.testing.assert_close(loss, exact_loss, rtol=1e-6, atol=0)
        draws.append(torch.cat([g.flatten() for g in grads.values()]))
    draws = torch.stack(draws)
    single = float((draws - exact).norm(dim=1).mean())
    averaged = float((draws.mean(0) - exact).norm())
    assert single > 0  # the backward really read compressed activations
    assert averaged < 0.5 * single, (single, averaged)


def test_sampled_kgat_scores_its_ego_columns_as_table_rows(tiny_dataset, make_config, ckg):
    """Compressed, the sampled step splits KGAT's scores as the whole-graph step does: the ego
    columns read from the table at the batch's nodes (saved as indices, exact), the layers'
    columns at the seeds; the same vectors as the one concatenation FP32 keeps."""
    model = make_model("kgat", tiny_dataset, make_config, bits=2, **NO_DROPOUT)
    batch = first_batch(tiny_dataset)
    graph = step_graph(model, ckg, batch, (3,) * len(model.layers))
    rows = ParameterRows(model)
    with compress_saved_tensors(model.compression):
        ego, layers = model.local_vector_groups(*batch, graph, rows)
        user_vectors, item_vectors, at = model.local_propagate(graph, rows)
        for index, vectors, ego_part, layer_part in zip(
            at, (user_vectors, item_vectors, item_vectors), ego, layers, strict=True
        ):
            joined = torch.cat([ego_part, layer_part], dim=1)
            assert torch.equal(joined, vectors[index])
            found = gathered_rows(ego_part)
            assert found is not None and found.weight is model.node_embedding
    exact = make_model("kgat", tiny_dataset, make_config, bits=32, **NO_DROPOUT)
    assert len(exact.local_vector_groups(*batch, graph, ParameterRows(exact))) == 1


class CopiedRows:
    """`rows` over detached copies of the model's tables, recording every id looked up."""

    def __init__(self, model, tables: list[str]) -> None:
        self.copies = {t: getattr(model, t).detach().clone().requires_grad_() for t in tables}
        self.read: dict[str, list[torch.Tensor]] = {t: [] for t in tables}

    def __call__(self, table: str, ids: torch.Tensor) -> torch.Tensor:
        self.read[table].append(ids.reshape(-1))
        return self.copies[table][ids]


@pytest.mark.parametrize("name", SAMPLED)
def test_the_local_path_reads_the_tables_only_through_rows_at_the_ids_it_names(
    name, tiny_dataset, make_config, ckg
):
    model = make_model(name, tiny_dataset, make_config, bits=2)
    batch = first_batch(tiny_dataset)
    graph = step_graph(model, ckg, batch, (3, 3))
    rows = CopiedRows(model, TABLES[name])
    needed = model.rows_needed(*batch, graph)
    assert set(needed) == set(TABLES[name])
    model.local_loss(*batch, graph, rows).backward()
    for table in TABLES[name]:
        assert getattr(model, table).grad is None  # never read directly
        assert rows.copies[table].grad is not None and rows.copies[table].grad.abs().sum() > 0
        ids = needed[table]
        assert torch.equal(ids, torch.unique(ids))  # sorted, distinct
        read = torch.unique(torch.cat(rows.read[table]))
        assert bool(torch.isin(read, ids).all())


@pytest.mark.parametrize("name", SAMPLED)
def test_default_rows_are_the_parameters(name, tiny_dataset, make_config, ckg):
    model = make_model(name, tiny_dataset, make_config, **NO_DROPOUT)
    batch = first_batch(tiny_dataset)
    graph = step_graph(model, ckg, batch, (3, 3))
    torch.manual_seed(1)
    implicit = model.local_loss(*batch, graph)
    torch.manual_seed(1)
    explicit = model.local_loss(*batch, graph, ParameterRows(model))
    assert torch.equal(implicit, explicit)


def test_kgat_kg_phase_reads_node_rows_through_rows(tiny_dataset, make_config):
    model = make_model("kgat", tiny_dataset, make_config, bits=2)
    heads, relations, tails = (
        torch.from_numpy(a.copy()) for a in tiny_dataset.triples_array()[:64].T
    )
    batch = (heads, relations, tails, tails.flip(0))
    torch.manual_seed(2)
    whole_loss, whole = loss_and_gradients(model, lambda: model.kg_loss(*batch))
    torch.manual_seed(2)
    local_loss, local = loss_and_gradients(
        model, lambda: model.kg_loss(*batch, rows=ParameterRows(model))
    )
    torch.testing.assert_close(local_loss, whole_loss, rtol=1e-6, atol=0)
    for key in whole:
        torch.testing.assert_close(local[key], whole[key], rtol=1e-4, atol=1e-7, msg=key)
    rows = CopiedRows(model, ["node_embedding"])
    model.zero_grad(set_to_none=True)
    model.kg_loss(*batch, rows=rows).backward()
    assert model.node_embedding.grad is None and rows.copies["node_embedding"].grad is not None


@pytest.mark.parametrize("name", SAMPLED)
def test_sampled_steps_with_few_neighbors_lower_the_loss(name, tiny_dataset, make_config, ckg):
    model = make_model(name, tiny_dataset, make_config, bits=2)
    sampler = model.step_sampler(ckg, (5, 5))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    model.train()
    for epoch in range(8):
        model.on_epoch_start(epoch)
        for index, batch in enumerate(BPRBatches(tiny_dataset, 256, seed=0).epoch(epoch)):
            rng = np.random.default_rng([epoch, index])
            graph = sampler.sample(*(t.numpy() for t in batch), rng)
            optimizer.zero_grad()
            with compress_saved_tensors(model.compression):
                loss = model.local_loss(*batch, graph)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert all(np.isfinite(losses))
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    assert last < 0.85 * first, (first, last)


@pytest.mark.parametrize("bits", [32, 2])
@pytest.mark.parametrize("name", ["kgat", "kgin"])
def test_a_sampled_step_holds_a_fraction_of_the_whole_graph_activations(
    name, bits, tiny_dataset, make_config, ckg
):
    """A small batch's 2-hop subgraph (2 neighbors per node) is a small part of the graph, and so
    are the bytes its step saves for backward. (LightGCN's whole-graph step saves nothing per node,
    KGCN's is per pair already: neither has whole-graph activations to cut.)"""
    model = make_model(name, tiny_dataset, make_config, bits=bits)
    batch = first_batch(tiny_dataset, 8)
    graph = step_graph(model, ckg, batch, (2, 2))
    assert graph.num_nodes * 5 < ckg.num_nodes
    held = {}
    for label, compute in (
        ("whole", lambda: model.loss(*batch)),
        ("sampled", lambda: model.local_loss(*batch, graph)),
    ):
        with compress_saved_tensors(model.compression), ActivationMeter(model) as meter:
            loss = compute()  # held: the graph stays alive
        held[label] = meter.total_bytes
        del loss
    assert 0 < held["sampled"] * 4 < held["whole"], held


@pytest.mark.parametrize("bits", [32, 2])
def test_a_sampled_kgat_step_gathers_its_table_once(bits, tiny_dataset, make_config, ckg):
    """The subgraph's rows, the scored ego rows and the L2 penalty's come from one gather of the
    node table, so backward makes one table-sized gradient: with a gather each, two of them were
    live at once while autograd added them (a dense table more at a sampled step's peak)."""
    from tinykg_train.memory import allocation_peak

    model = make_model("kgat", tiny_dataset, make_config, bits=bits, embed_dim=64)
    assert model.l2 > 0
    batch = first_batch(tiny_dataset, 8)
    graph = step_graph(model, ckg, batch, (2, 2))
    with compress_saved_tensors(model.compression):
        loss = model.local_loss(*batch, graph)
    with allocation_peak(torch.device("cpu")) as window:
        loss.backward()
    table = model.node_embedding.numel() * 4
    assert table <= window.peak_bytes < 1.5 * table, (window.peak_bytes, table)


def test_sampled_subgraphs_follow_each_models_edges(tiny_dataset, make_config, ckg):
    batch = first_batch(tiny_dataset, 32)
    relations = {}
    for name in GRAPH_MODELS:
        graph = step_graph(make_model(name, tiny_dataset, make_config), ckg, batch, (4, 4))
        relations[name] = set(graph.relation.tolist())
    n_kg = 2 * tiny_dataset.n_relations
    assert relations["kgat"] == {0, 1, *range(2, 2 + n_kg)}
    assert relations["kgin"] == {0, *range(2, 2 + n_kg)}  # users never update items
    assert relations["lightgcn"] == {0, 1}


@pytest.mark.parametrize("name", ["bprmf"])
def test_a_model_without_a_graph_refuses_to_sample(name, tiny_dataset, make_config, ckg):
    model = make_model(name, tiny_dataset, make_config)
    with pytest.raises(
        ConfigError, match="BPRMF has no graph to sample: train it with --sampler none"
    ):
        model.step_sampler(ckg, (10, 10))


def test_kgcn_refuses_all_neighbors(tiny_dataset, make_config, ckg):
    model = make_model("kgcn", tiny_dataset, make_config)
    with pytest.raises(ConfigError, match="KGCN draws a fixed number of neighbors per node"):
        model.step_sampler(ckg, (-1, 4))
