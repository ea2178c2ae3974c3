"""Edge partitions: a disjoint cover of the train edges, self-contained parts, closed KG neighborhoods."""

from __future__ import annotations

import numpy as np
import pytest

from kg_data import KGDataset, PartitionPlan, partition_edges
from kg_data.errors import KGDataError


def bfs_entities(triples: np.ndarray, start: set[int], hops: int) -> set[int]:
    """Plain-Python breadth-first search over the KG, both directions."""
    adjacency: dict[int, set[int]] = {}
    for h, _, t in triples.tolist():
        adjacency.setdefault(h, set()).add(t)
        adjacency.setdefault(t, set()).add(h)
    reached, frontier = set(start), set(start)
    for _ in range(hops):
        frontier = {n for node in frontier for n in adjacency.get(node, ())} - reached
        reached |= frontier
    return reached


@pytest.mark.parametrize("method", ["greedy", "random"])
def test_parts_cover_the_train_edges_once_and_are_self_contained(tiny_dataset_dir, method):
    ds = KGDataset.open(tiny_dataset_dir)
    pairs, triples = ds.pairs("train"), ds.triples_array()
    plan = partition_edges(ds, num_parts=4, hops=2, seed=0, method=method)
    assert isinstance(plan, PartitionPlan) and len(plan.parts) == 4 and plan.hops == 2
    all_pairs = np.concatenate([part.pairs for part in plan.parts])
    assert sorted(map(tuple, all_pairs.tolist())) == sorted(map(tuple, pairs.tolist()))
    owners = {}
    for part in plan.parts:
        for user in part.users.tolist():
            assert owners.setdefault(user, part.index) == part.index  # a user's edges stay together
        # edges reference only the part's nodes
        assert (
            np.isin(part.pairs[:, 0], part.users).all()
            and np.isin(part.pairs[:, 1], part.entities).all()
        )
        assert np.isin(part.triples[:, [0, 2]], part.entities).all()
        # the KG neighborhood is exactly the 2-hop closure of the part's items
        assert set(part.entities.tolist()) == bfs_entities(
            triples, set(part.pairs[:, 1].tolist()), 2
        )
        # and carries every triple among its entities
        inside = np.isin(triples[:, 0], part.entities) & np.isin(triples[:, 2], part.entities)
        assert len(part.triples) == inside.sum()
        assert np.array_equal(
            part.nodes, np.concatenate([part.entities, part.users + ds.n_entities])
        )
    assert plan.edge_balance < 1.1


def test_replication_factor(tiny_dataset_dir):
    plan = partition_edges(tiny_dataset_dir, num_parts=3, hops=1, seed=0)
    total = sum(part.num_nodes for part in plan.parts)
    distinct = len(set(np.concatenate([part.nodes for part in plan.parts]).tolist()))
    assert plan.replication_factor == pytest.approx(total / distinct)
    assert plan.replication_factor > 1.0
    assert partition_edges(tiny_dataset_dir, num_parts=1, hops=2).replication_factor == 1.0
    shallow = partition_edges(tiny_dataset_dir, num_parts=3, hops=0, seed=0)
    assert shallow.replication_factor <= plan.replication_factor


def test_greedy_replicates_less_than_random_blocks(tiny_dataset_dir):
    greedy = partition_edges(tiny_dataset_dir, num_parts=8, hops=0, seed=0, method="greedy")
    random = partition_edges(tiny_dataset_dir, num_parts=8, hops=0, seed=0, method="random")
    assert greedy.replication_factor < random.replication_factor


def test_same_seed_same_plan(tiny_dataset_dir):
    a = partition_edges(tiny_dataset_dir, num_parts=4, hops=1, seed=3)
    b = partition_edges(tiny_dataset_dir, num_parts=4, hops=1, seed=3)
    assert all(np.array_equal(x.pairs, y.pairs) for x, y in zip(a.parts, b.parts, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_parts": 0}, "'num_parts' needs to be a positive integer"),
        ({"num_parts": 10_000}, "exceeds the 200 users"),
        ({"num_parts": 2, "hops": -1}, "'hops' needs to be a non-negative integer"),
        ({"num_parts": 2, "method": "metis"}, "'method' needs to be one of greedy, random"),
    ],
)
def test_bad_arguments(tiny_dataset_dir, kwargs, message):
    with pytest.raises(KGDataError, match=message):
        partition_edges(tiny_dataset_dir, **kwargs)
