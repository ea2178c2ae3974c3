"""Graph tensors built from the dataset: CKG edges, KG-only edges, LightGCN and KGIN weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kg_data import CKG
from tinykg_train.models.graphs import (
    ckg_edges,
    compact,
    item_to_user_mean,
    kg_only,
    sort_by_relation,
    user_item_graph,
)


def test_ckg_edges_are_the_ckg_with_neighbor_as_source(tiny_dataset):
    ckg = CKG.from_dataset(tiny_dataset)
    heads, tails, relations = ckg.coo()
    edges = ckg_edges(tiny_dataset)
    assert edges.edge_index.dtype == torch.int32
    assert np.array_equal(edges.edge_index[0].numpy(), tails)
    assert np.array_equal(edges.edge_index[1].numpy(), heads)
    assert np.array_equal(edges.relation.numpy(), relations)
    assert edges.num_nodes == tiny_dataset.n_entities + tiny_dataset.n_users


def test_kg_only_drops_interactions_and_shifts_relations(tiny_dataset):
    edges = kg_only(ckg_edges(tiny_dataset))
    n_entities, R = tiny_dataset.n_entities, tiny_dataset.n_relations
    assert int(edges.edge_index.max()) < n_entities  # no user node
    assert set(edges.relation.tolist()) <= set(range(2 * R))
    assert edges.num_edges == 2 * tiny_dataset.n_triples


def test_user_item_graph_weights_are_symmetric_normalised(tiny_dataset):
    graph = user_item_graph(tiny_dataset)
    n_items = tiny_dataset.n_items
    source, target = graph.edge_index.long()
    degree = torch.bincount(target, minlength=graph.num_nodes).float()
    torch.testing.assert_close(graph.weight, (degree[source] * degree[target]).rsqrt())
    pairs = tiny_dataset.pairs("train")
    assert graph.num_edges == 2 * len(pairs)
    users_to_items = (source >= n_items) & (target < n_items)
    assert int(users_to_items.sum()) == len(pairs)


def test_item_to_user_weights_average_each_users_items(tiny_dataset):
    graph = item_to_user_mean(tiny_dataset)
    users = graph.edge_index[1].long()
    per_user = torch.zeros(tiny_dataset.n_users).index_add_(0, users, graph.weight)
    active = torch.bincount(users, minlength=tiny_dataset.n_users) > 0
    torch.testing.assert_close(per_user[active], torch.ones(int(active.sum())))
    assert int(graph.edge_index[0].max()) < tiny_dataset.n_items


def test_sort_by_relation_groups_rows_stably():
    relation = torch.tensor([2, 0, 2, 1, 0])
    order, counts = sort_by_relation(relation, 4)
    assert order.tolist() == [1, 4, 3, 0, 2]
    assert counts == [2, 1, 2, 0]


@pytest.mark.parametrize("num_relations", [4, 200, 40_000])
def test_sort_by_relation_is_torch_s_stable_order_for_narrow_and_wide_ids(num_relations):
    """The CPU path sorts ids narrowed to int8 / int16 with numpy's radix sort, and ids past
    int16 with torch's: every path gives torch's stable order, int64, and the counts."""
    gen = torch.Generator().manual_seed(num_relations)
    relation = torch.randint(0, num_relations, (50_000,), generator=gen)
    order, counts = sort_by_relation(relation, num_relations)
    assert order.dtype == torch.int64
    assert torch.equal(order, torch.argsort(relation, stable=True))
    assert counts == torch.bincount(relation, minlength=num_relations).tolist()


def test_compact_keeps_int64_only_when_needed():
    assert compact(torch.tensor([0, 5])).dtype == torch.int32
    assert compact(torch.tensor([0, 2**31])).dtype == torch.int64
