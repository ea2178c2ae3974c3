"""KGCN's trees drawn afresh per step: every child a KG neighbor of its parent by the relation
recorded, distinct where the parent has enough neighbors, and the same draws for the same RNG."""

from __future__ import annotations

import numpy as np
import pytest

from kg_data import CKG
from tinykg_train.errors import ConfigError
from tinykg_train.scale.receptive_field import ReceptiveFieldSampler


@pytest.fixture(scope="module")
def sampler(dataset) -> ReceptiveFieldSampler:
    return ReceptiveFieldSampler(CKG.from_dataset(dataset), (4, 3))


def kg_links(dataset) -> tuple[set[tuple[int, int, int]], np.ndarray]:
    """(entity, KG relation, neighbor) both ways, and each entity's number of distinct neighbors."""
    heads, relations, tails = dataset.triples_array().T
    links = set(zip(heads.tolist(), relations.tolist(), tails.tolist(), strict=True))
    links |= set(zip(tails.tolist(), relations.tolist(), heads.tolist(), strict=True))
    degree = np.zeros(dataset.n_entities, dtype=np.int64)
    for entity, _, _ in links:
        degree[entity] += 1
    return links, degree


def sample(sampler, dataset, seed: int):
    items = np.arange(dataset.n_items, dtype=np.int64)
    users = np.zeros(len(items), dtype=np.int64)  # users play no part in the trees
    return sampler.sample(users, items, items[::-1].copy(), np.random.default_rng(seed))


def test_every_child_is_a_kg_neighbor_by_the_recorded_relation(sampler, dataset):
    field = sample(sampler, dataset, 0)
    links, degree = kg_links(dataset)
    assert field.entities[0].shape == (2 * dataset.n_items, 1)
    for depth, k in enumerate((4, 3)):
        parents = field.entities[depth].numpy().repeat(k, axis=1)
        children = field.entities[depth + 1].numpy()
        relations = field.relations[depth].numpy()
        assert children.shape == relations.shape == (2 * dataset.n_items, parents.shape[1])
        drawn = zip(parents.ravel(), relations.ravel(), children.ravel(), strict=True)
        for parent, relation, child in drawn:
            if degree[parent] == 0:
                assert (child, relation) == (parent, 0)  # an isolated entity points to itself
            else:
                assert (int(parent), int(relation), int(child)) in links


def test_children_are_distinct_where_the_parent_has_enough_neighbors(dataset):
    k = 8
    field = sample(ReceptiveFieldSampler(CKG.from_dataset(dataset), (k,)), dataset, 1)
    _, degree = kg_links(dataset)
    parents = field.entities[0].numpy()[:, 0]
    children = field.entities[1].numpy()
    relations = field.relations[0].numpy()
    rich = degree[parents] >= k
    assert rich.any() and (~rich & (degree[parents] > 0)).any()  # both cases met
    for row in range(len(parents)):
        distinct = len(set(zip(children[row], relations[row], strict=True)))
        assert distinct == k if rich[row] else distinct <= degree[parents[row]]


def test_the_same_rng_draws_the_same_trees_and_another_differs(sampler, dataset):
    a, b, c = (sample(sampler, dataset, seed) for seed in (7, 7, 8))
    assert all(np.array_equal(x, y) for x, y in zip(a.entities, b.entities, strict=True))
    assert not np.array_equal(a.entities[2], c.entities[2])
    assert a.num_nodes == sum(e.numel() for e in a.entities) == 2 * dataset.n_items * (1 + 4 + 12)


def test_all_neighbors_is_refused_with_how_to_fix(dataset):
    with pytest.raises(ConfigError, match="give positive 'fanouts'"):
        ReceptiveFieldSampler(CKG.from_dataset(dataset), (4, -1))
