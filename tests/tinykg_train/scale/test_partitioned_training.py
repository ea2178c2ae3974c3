"""Partitioned training's sources: every interaction and triple once per epoch, self-sufficient
partition graphs, constraint-based negatives, and one partition's step equal to the whole-graph step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kg_data import CKG
from kg_data.graph import INTERACTED_BY
from kg_data.partition import kg_neighborhood
from tinykg_train.compress import compress_saved_tensors
from tinykg_train.config import TrainConfig
from tinykg_train.models import build_model
from tinykg_train.scale.partition_plan import build_partitions, triple_owners
from tinykg_train.scale.partitioned_training import (
    PartitionCFBatches,
    PartitionedBatches,
    PartitionKGBatches,
    partition_order,
)

LAYERS = 2


@pytest.fixture(scope="module")
def three(dataset, ckg):
    return build_partitions(dataset, ckg, 3, LAYERS, seed=0)


def sorted_rows(array: np.ndarray) -> np.ndarray:
    return array[np.lexsort(array.T[::-1])]


def test_every_train_interaction_is_in_exactly_one_step_per_epoch(dataset, three):
    batches = PartitionCFBatches(three, batch_size=50, seed=0)
    steps = list(batches.epoch(0))
    assert len(steps) == len(batches)
    seen = np.concatenate([np.stack([u.numpy(), p.numpy()], 1) for _, u, p, _ in steps])
    np.testing.assert_array_equal(sorted_rows(seen), sorted_rows(dataset.pairs("train")))
    # a partition's steps come together, in the epoch's seeded order
    visited = [index for index, *_ in steps]
    assert [k for i, k in enumerate(visited) if i == 0 or visited[i - 1] != k] == list(
        partition_order(0, 0, 3)
    )
    assert len({tuple(partition_order(0, epoch, 3)) for epoch in range(6)}) > 1


def test_negatives_are_items_of_the_partition_and_never_a_positive(dataset, three):
    positives = {tuple(p) for p in dataset.pairs("train")}
    for index, users, _, negatives in PartitionCFBatches(three, 50, seed=1).epoch(0):
        part = three.parts[index]
        assert np.isin(negatives.numpy(), part.items).all()
        assert not any(
            (u, n) in positives for u, n in zip(users.tolist(), negatives.tolist(), strict=True)
        )


def test_every_kg_triple_is_trained_by_exactly_one_partition_per_epoch(dataset, three):
    batches = PartitionKGBatches(three, batch_size=64, seed=0)
    steps = list(batches.epoch(0))
    assert len(steps) == len(batches)
    seen = np.concatenate([np.stack([h.numpy(), r.numpy(), t.numpy()], 1) for h, r, t, *_ in steps])
    np.testing.assert_array_equal(sorted_rows(seen), sorted_rows(dataset.triples_array()))


@pytest.mark.parametrize("source", [PartitionCFBatches, PartitionKGBatches])
def test_negative_samplers_exist_for_one_partition_at_a_time_and_draw_alike(source, three):
    """Built when a partition's first step comes, dropped for the next and when the epoch ends:
    their draws are those of samplers built once and kept (what training did before)."""
    batches = source(three, 64, seed=2)
    kept = source(three, 64, seed=2)
    built = {index: kept.negatives.build(index) for index in range(len(three))}
    kept.negatives.build = built.__getitem__  # every partition's sampler, built once and held
    held = []
    for step, same in zip(batches.epoch(0), kept.epoch(0), strict=True):
        held.append(batches.negatives.current[0])
        for a, b in zip(step, same, strict=True):
            assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))
    assert batches.negatives.current is None  # released with the epoch
    if source is PartitionCFBatches:  # each step says its partition: the sampler is that one's
        assert held == [index for index, *_ in batches.epoch(0)]
    assert len(set(held)) == len(three)


def test_a_triple_goes_to_a_partition_holding_both_its_ends_uniformly():
    holds = np.zeros((3, 30000), dtype=bool)
    holds[[0, 2], :10000] = True  # held by parts 0 and 2
    holds[1, 10000:20000] = True  # held by part 1 only; the rest by none (any part)
    owner = triple_owners(holds, seed=0)
    assert set(owner[:10000]) == {0, 2} and abs(np.mean(owner[:10000] == 0) - 0.5) < 0.02
    assert (owner[10000:20000] == 1).all()
    assert np.allclose(np.bincount(owner[20000:], minlength=3) / 10000, 1 / 3, atol=0.02)


def test_constraint_negatives_are_tails_the_relation_has_in_the_partition(three):
    for index in range(len(three)):
        part = three.parts[index]
        tails_of = {
            r: set(part.known_triples[part.known_triples[:, 1] == r, 2])
            for r in np.unique(part.known_triples[:, 1])
        }
        known = {tuple(t) for t in part.known_triples}
        sampler = part.negative_tails()
        heads, relations, _ = part.triples.T
        rng = np.random.default_rng(0)
        for _ in range(5):
            negatives = sampler.sample(heads, relations, rng=rng)
            for h, r, n in zip(heads, relations, negatives, strict=True):
                assert (h, r, n) not in known
                whole_range = all((h, r, t) in known for t in tails_of[r])
                assert whole_range or n in tails_of[r], (h, r, n)


def kg_degree(ckg: CKG, nodes: np.ndarray) -> np.ndarray:
    heads, _, relation = ckg.coo()
    kg = relation > INTERACTED_BY
    return np.bincount(heads[kg], minlength=ckg.num_nodes)[nodes]


def test_partition_graphs_hold_every_edge_their_layers_need(dataset, ckg, three):
    """A KG node within LAYERS - 1 hops of a partition's items has all its KG edges in the
    partition's graph, a user of the partition all its interactions: an L-layer step on the
    partition reads the same KG neighborhoods as on the whole graph."""
    covered = set()
    for part in three.parts:
        graph = part.graph(ckg)
        needed = kg_neighborhood(ckg, part.items, LAYERS - 1)
        np.testing.assert_array_equal(kg_degree(graph, needed), kg_degree(ckg, needed))
        users = np.unique(part.pairs[:, 0]) + ckg.n_entities
        np.testing.assert_array_equal(graph.degree[users], ckg.degree[users])
        covered |= set(users.tolist())
        # the edges are the CKG's own: same ends and relation at the positions they map to
        heads, tails, relation = ckg.coo()
        sub_heads, sub_tails, sub_relation = graph.coo()
        np.testing.assert_array_equal(heads[part.edges], sub_heads)
        np.testing.assert_array_equal(tails[part.edges], sub_tails)
        np.testing.assert_array_equal(relation[part.edges], sub_relation)
    assert len(covered) == len(np.unique(dataset.pairs("train")[:, 0]))
    assert three.replication >= 1.0 and len(three.nodes_per_partition) == 3


def make_model(name, dataset, **settings):
    torch.manual_seed(0)
    config = TrainConfig(
        model=name,
        embed_dim=16,
        n_layers=LAYERS,
        dropout=0.0,
        extra={"edge_dropout": 0.0} if name == "kgin" else {},
        **settings,
    )
    return build_model(name, dataset, config)


def loss_and_gradients(model, compute):
    model.zero_grad(set_to_none=True)
    with compress_saved_tensors(model.compression):
        loss = compute()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def first_step(model, partitions, ckg):
    batches = PartitionedBatches(model, partitions, ckg, (-1,) * LAYERS, batch_size=64, seed=0)
    return batches.make(0, 0, next(iter(batches.cf_batches.epoch(0))))


@pytest.mark.parametrize("name", ["kgat", "kgin", "lightgcn"])
def test_one_partition_step_is_the_whole_graph_step(name, dataset, ckg):
    """With one partition (its graph: every node within the layers' reach) a step's loss and every
    gradient are the whole-graph step's at 32 bits."""
    model = make_model(name, dataset, bits=32)
    hops = LAYERS if model.follows_kg else 0
    one = build_partitions(dataset, ckg, 1, hops, seed=0)
    users, pos, neg, graph = first_step(model, one, ckg)
    whole_loss, whole = loss_and_gradients(model, lambda: model.loss(users, pos, neg))
    local_loss, local = loss_and_gradients(model, lambda: model.local_loss(users, pos, neg, graph))
    torch.testing.assert_close(local_loss, whole_loss, rtol=1e-6, atol=0)
    assert local.keys() == whole.keys() and whole
    for key in whole:
        torch.testing.assert_close(local[key], whole[key], rtol=1e-4, atol=1e-7, msg=key)


def test_an_epoch_s_end_lets_go_of_the_last_partition_s_graph(dataset, ckg, three):
    model = make_model("lightgcn", dataset, bits=2)
    batches = PartitionedBatches(model, three, ckg, (-1,) * LAYERS, batch_size=64, seed=0)
    with batches.running(0):
        first = next(iter(batches.epoch(0)))
        assert batches.samplers.current is not None  # the partition being sampled keeps its graph
    assert batches.samplers.current is None  # not held through the evaluation that follows
    with batches.running(1):  # the next epoch builds it again
        again = next(iter(batches.epoch(1)))
    assert len(first) == len(again) == 4


def test_a_kgat_step_reads_the_attention_of_the_edges_it_propagates_over(dataset, ckg, three):
    model = make_model("kgat", dataset, bits=2)
    *_, graph = first_step(model, three, ckg)
    heads, tails, relation = ckg.coo()
    ids = graph.edge_id.long().numpy()
    node = graph.node.numpy()
    np.testing.assert_array_equal(tails[ids], node[graph.edge_index[0].long().numpy()])
    np.testing.assert_array_equal(heads[ids], node[graph.edge_index[1].long().numpy()])
    np.testing.assert_array_equal(relation[ids], graph.relation.numpy())
    part_nodes = np.concatenate([p.nodes for p in three.parts if np.isin(node, p.nodes).all()])
    assert len(part_nodes)  # the step's nodes all lie in one partition


def test_the_kg_phase_trains_its_partitions_interactions(dataset, three):
    model = make_model("kgat", dataset, bits=2)
    batches = PartitionKGBatches(three, batch_size=64, seed=0)
    heads, relations, tails, neg_tails, users, items, neg_items = next(iter(batches.epoch(0)))
    index = int(partition_order(0, 0, 3)[0])
    part = three.parts[index]
    pairs = {tuple(p) for p in part.pairs}
    assert all(
        (u - dataset.n_entities, i) in pairs
        for u, i in zip(users.tolist(), items.tolist(), strict=True)
    )
    assert np.isin(neg_items.numpy(), part.items).all()
    loss = model.kg_loss(heads, relations, tails, neg_tails, interactions=(users, items, neg_items))
    loss.backward()
    assert torch.isfinite(loss) and model.node_embedding.grad is not None
