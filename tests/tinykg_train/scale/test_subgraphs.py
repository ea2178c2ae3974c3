"""Step samplers: relation-restricted views of the CKG, the batch's seeds, real CKG edges drawn at
most `fanout` per node, and `LocalGraph`'s layer blocks (prefixes that hold every edge a layer needs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kg_data import CKG, BPRBatches
from tinykg_train.errors import ConfigError, TinyKGError
from tinykg_train.scale.subgraphs import NeighborStepSampler, layer_blocks, restrict_relations


@pytest.fixture(scope="module")
def batch(dataset) -> tuple[np.ndarray, ...]:
    return tuple(t.numpy() for t in next(iter(BPRBatches(dataset, 64, seed=0).epoch(0))))


def ckg_edges(ckg: CKG) -> set[tuple[int, int, int]]:
    heads, tails, relations = ckg.coo()
    return set(zip(heads.tolist(), relations.tolist(), tails.tolist(), strict=True))


def test_a_restricted_view_holds_exactly_the_kept_relations_and_their_positions(ckg):
    keep = [0, 3, 4]
    view, origin = restrict_relations(ckg, keep)
    heads, tails, relations = ckg.coo()
    kept = np.isin(relations, keep)
    assert np.array_equal(origin, np.flatnonzero(kept))
    view_heads, view_tails, view_relations = view.coo()
    assert np.array_equal(view_heads, heads[kept]) and np.array_equal(view_tails, tails[kept])
    assert np.array_equal(view_relations, relations[kept])
    assert view.num_nodes == ckg.num_nodes


def test_seeds_are_the_batch_and_every_edge_is_a_ckg_edge_at_its_edge_id(ckg, batch):
    graph = NeighborStepSampler(ckg, (4, 4)).sample(*batch, np.random.default_rng(0))
    users, pos, neg = batch
    nodes = np.concatenate([users + ckg.n_entities, pos, neg])
    assert graph.num_seeds == len(np.unique(nodes))
    assert set(graph.node[: graph.num_seeds].tolist()) == set(nodes.tolist())
    assert len(set(graph.node.tolist())) == graph.num_nodes  # each node once
    at_user, at_pos, at_neg = graph.batch
    assert torch.equal(graph.node[at_user], torch.from_numpy(users + ckg.n_entities))
    assert torch.equal(graph.node[at_pos], torch.from_numpy(pos))
    assert torch.equal(graph.node[at_neg], torch.from_numpy(neg))
    heads, tails = graph.node[graph.edge_index[1]], graph.node[graph.edge_index[0]]
    edge_id = graph.edge_id.numpy()
    assert np.array_equal(ckg.indices[edge_id], tails.numpy())
    assert np.array_equal(ckg.relation[edge_id], graph.relation.numpy())
    rows = np.searchsorted(ckg.indptr, edge_id, side="right") - 1
    assert np.array_equal(rows, heads.numpy())


def test_each_node_gets_at_most_its_fanout_and_minus_one_takes_all(ckg, batch):
    for fanouts in ((3, 2), (-1, -1)):
        graph = NeighborStepSampler(ckg, fanouts).sample(*batch, np.random.default_rng(1))
        drawn = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes)
        expanded = graph.num_within(len(fanouts) - 1)  # the nodes the hops expanded
        degree = torch.from_numpy(ckg.degree)[graph.node[:expanded]]
        if fanouts[0] == -1:
            assert torch.equal(drawn[:expanded], degree)
        else:
            for hop, fanout in enumerate(fanouts):
                nodes = slice(graph.num_within(hop - 1), graph.num_within(hop))
                assert torch.equal(drawn[nodes], degree[nodes].clamp(max=fanout))
        assert int(drawn[expanded:].sum()) == 0  # the last hop's new nodes draw nothing


def test_a_view_is_sampled_with_global_edge_ids(ckg, batch):
    sampler = NeighborStepSampler(ckg, (3, 3), relations=[0, 1])
    graph = sampler.sample(*batch, np.random.default_rng(2))
    assert set(graph.relation.tolist()) == {0, 1}
    assert np.array_equal(ckg.relation[graph.edge_id.numpy()], graph.relation.numpy())
    assert np.array_equal(
        ckg.indices[graph.edge_id.numpy()], graph.node[graph.edge_index[0]].numpy()
    )


def test_the_same_rng_draws_the_same_subgraph_and_another_differs(ckg, batch):
    sampler = NeighborStepSampler(ckg, (3, 3))
    a, b, c = (sampler.sample(*batch, np.random.default_rng(s)) for s in (5, 5, 6))
    assert torch.equal(a.node, b.node) and torch.equal(a.edge_id, b.edge_id)
    assert not torch.equal(a.edge_id, c.edge_id)


def test_layer_blocks_are_prefixes_holding_every_edge_into_their_targets(ckg, batch):
    graph = layer_blocks(
        NeighborStepSampler(ckg, (3, 3, 3)).sample(*batch, np.random.default_rng(3))
    )
    source, target = graph.edge_index
    distance = torch.repeat_interleave(
        torch.arange(len(graph.nodes_per_hop)), torch.tensor(graph.nodes_per_hop)
    )
    assert torch.equal(distance[target], graph.hop)  # a node's edges are drawn at its distance
    assert bool((distance[source] <= graph.hop + 1).all())
    for layer, block in enumerate(graph.aux["blocks"], start=1):
        targets, sources, edges = graph.block(layer, 3)
        assert (block.num_nodes, block.num_sources) == (targets, sources)
        assert targets == graph.num_within(3 - layer)
        assert bool((target[:edges] < targets).all()) and bool((source[:edges] < sources).all())
        assert bool((target[edges:] >= targets).all())  # no edge into a target left out
    last = graph.aux["blocks"][-1]
    assert last.num_nodes == graph.num_seeds


def test_every_blocks_matrix_entries_are_a_prefix_of_the_first_blocks(ckg, batch):
    graph = layer_blocks(
        NeighborStepSampler(ckg, (3, 3, 3)).sample(*batch, np.random.default_rng(3))
    )
    weight = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(0))
    first = graph.aux["blocks"][0].values(weight)
    for block in graph.aux["blocks"]:
        edges = block.slot.shape[0]
        assert torch.equal(block.values(weight[:edges]), first[: block.num_entries])


def test_position_finds_nodes_and_refuses_others(ckg, batch):
    graph = NeighborStepSampler(ckg, (2, 2)).sample(*batch, np.random.default_rng(4))
    order = torch.randperm(graph.num_nodes)
    assert torch.equal(graph.position(graph.node[order]), order)
    outside = torch.tensor(sorted(set(range(ckg.num_nodes)) - set(graph.node.tolist()))[:1])
    with pytest.raises(TinyKGError, match="does not hold"):
        graph.position(outside)


def test_no_layer_to_sample_for_is_a_config_error(ckg):
    with pytest.raises(ConfigError, match="needs at least one layer"):
        NeighborStepSampler(ckg, ())
