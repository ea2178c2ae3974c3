"""NeighborSampler: edges exist, fanouts hold, no duplicates, uniform choice, reproducibility, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kg_data
from kg_data import CKG, NeighborSampler, SampledSubgraph
from kg_data.errors import KGDataError
from tests.chi_square import chi_square, chi_square_critical


@pytest.fixture(scope="module")
def ckg(tiny_dataset_dir) -> CKG:
    return CKG.from_dataset(tiny_dataset_dir)


def edge_set(ckg: CKG) -> set[tuple[int, int, int]]:
    heads, tails, rels = ckg.coo()
    return set(zip(heads.tolist(), rels.tolist(), tails.tolist(), strict=True))


def seeds_of(ckg: CKG, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).choice(ckg.num_nodes, n, replace=False)


def check_subgraph(
    ckg: CKG, out: SampledSubgraph, seeds: np.ndarray, fanouts: list[int], edges: set
) -> None:
    """The invariants every sample must hold."""
    node = out.node
    assert np.array_equal(node[: len(seeds)], seeds) and out.num_seeds == len(seeds)
    assert len(np.unique(node)) == len(node)
    assert sum(out.num_sampled_nodes) == len(node) and sum(out.num_sampled_edges) == out.num_edges
    source, target = node[out.edge_index[0]], node[out.edge_index[1]]
    # every edge exists, and edge_id points at it in the CSR row of its target
    assert all(
        e in edges
        for e in zip(target.tolist(), out.relation.tolist(), source.tolist(), strict=True)
    )
    assert np.array_equal(ckg.indices[out.edge_id], source) and np.array_equal(
        ckg.relation[out.edge_id], out.relation
    )
    assert np.all((out.edge_id >= ckg.indptr[target]) & (out.edge_id < ckg.indptr[target + 1]))
    # hop i expands exactly the nodes that hop i-1 reached first, each with at most its fanout
    first = np.cumsum((0, *out.num_sampled_nodes))
    for hop, fanout in enumerate(fanouts):
        mine = out.hop == hop
        expanded = np.arange(first[hop], first[hop + 1])
        counts = np.bincount(out.edge_index[1][mine], minlength=len(node))
        assert np.all(counts[expanded] == np.minimum(ckg.degree[node[expanded]], fanout))
        assert counts.sum() == counts[expanded].sum()
        assert np.all(
            out.edge_index[0][mine] < first[hop + 2]
        )  # neighbors known by the end of this hop


def test_sample_invariants_without_replacement(ckg):
    edges = edge_set(ckg)
    sampler = NeighborSampler(ckg, fanouts=[10, 5], replace=False, seed=0)
    for batch in range(3):
        seeds = seeds_of(ckg, 64, batch)
        out = sampler.sample(seeds)
        check_subgraph(ckg, out, seeds, [10, 5], edges)
        assert len(np.unique(out.edge_id)) == out.num_edges  # no duplicate edge


def test_sample_with_replacement_draws_exactly_fanout(ckg):
    edges = edge_set(ckg)
    seeds = seeds_of(ckg, 50, 1)
    out = NeighborSampler(ckg, fanouts=[30], replace=True, seed=0).sample(seeds)
    targets = out.node[out.edge_index[1]]
    assert all(
        e in edges
        for e in zip(
            targets.tolist(),
            out.relation.tolist(),
            out.node[out.edge_index[0]].tolist(),
            strict=True,
        )
    )
    counts = np.bincount(out.edge_index[1], minlength=len(seeds))[: len(seeds)]
    assert np.array_equal(counts, np.where(ckg.degree[seeds] > 0, 30, 0))
    assert (
        len(np.unique(out.edge_id)) < out.num_edges
    )  # some degrees are below 30: repeats must occur


def test_fanout_minus_one_takes_every_neighbor(ckg):
    seeds = seeds_of(ckg, 20, 2)
    out = NeighborSampler(ckg, fanouts=[-1], seed=0).sample(seeds)
    expected = np.concatenate([np.arange(ckg.indptr[s], ckg.indptr[s + 1]) for s in seeds])
    assert np.array_equal(np.sort(out.edge_id), np.sort(expected))


def test_choice_among_neighbors_is_uniform_chi_square(ckg):
    """A node of degree d, fanout k, sampled n times: each neighbor is chosen n*k/d times on average."""
    node = int(np.flatnonzero(ckg.degree == 20)[0])  # the tiny dataset has several
    degree, fanout, rounds = int(ckg.degree[node]), 4, 3000
    sampler = NeighborSampler(ckg, fanouts=[fanout], seed=11)
    counts = np.zeros(degree, dtype=np.int64)
    for _ in range(rounds):
        out = sampler.sample([node])
        counts += np.bincount(out.edge_id - ckg.indptr[node], minlength=degree)
    assert counts.sum() == rounds * fanout
    assert chi_square(counts) < chi_square_critical(degree - 1)

    # The same test rejects a sampler that slightly prefers later neighbors (weights 1 .. 1.5).
    rng = np.random.default_rng(11)
    weights = np.linspace(1.0, 1.5, degree)
    biased = np.zeros(degree, dtype=np.int64)
    for _ in range(rounds):
        biased[rng.choice(degree, fanout, replace=False, p=weights / weights.sum())] += 1
    assert chi_square(biased) > chi_square_critical(degree - 1)


def test_same_seed_same_sample_and_different_seed_differs(ckg):
    seeds = seeds_of(ckg, 32, 3)
    a = NeighborSampler(ckg, [10, 10], seed=5).sample(seeds)
    b = NeighborSampler(ckg, [10, 10], seed=5).sample(seeds)
    c = NeighborSampler(ckg, [10, 10], seed=6).sample(seeds)
    assert (
        np.array_equal(a.node, b.node)
        and np.array_equal(a.edge_index, b.edge_index)
        and np.array_equal(a.relation, b.relation)
    )
    assert not np.array_equal(np.sort(a.edge_id), np.sort(c.edge_id))


@pytest.mark.parametrize("relations", [None, {r: [3, 1] for r in range(4)}])
def test_a_narrowed_ckg_gives_the_same_subgraphs_with_the_same_dtypes(ckg, relations):
    """`CKG.narrowed()` keeps its neighbors at int32 and its relation ids at int8; a sampler over
    it draws what one over the int64 arrays draws, and hands back the same int64 arrays."""
    narrow = ckg.narrowed()
    assert narrow.indices.dtype == np.int32 and narrow.relation.dtype == np.int8
    assert ckg.indices.dtype == np.int64  # the original is left as it is
    seeds = seeds_of(ckg, 48, 7)
    wide = NeighborSampler(ckg, [4, 3], seed=2, relations=relations).sample(seeds)
    got = NeighborSampler(narrow, [4, 3], seed=2, relations=relations).sample(seeds)
    for name in ("node", "edge_index", "relation", "edge_id", "hop"):
        a, b = getattr(wide, name), getattr(got, name)
        assert a.dtype == b.dtype == np.int64 and np.array_equal(a, b), name


def test_the_node_map_is_reset_between_samples(ckg):
    sampler = NeighborSampler(ckg, [5, 5], seed=0)
    sampler.sample(seeds_of(ckg, 40, 4))
    assert np.all(sampler._local == -1)
    with pytest.raises(KGDataError):
        sampler.sample([0, 0])
    assert np.all(sampler._local == -1)


def test_per_relation_fanouts(ckg):
    edges = edge_set(ckg)
    seeds = seeds_of(ckg, 60, 5)
    interact_only = NeighborSampler(ckg, [3, 2], seed=0, relations=[0, 1]).sample(seeds)
    assert set(interact_only.relation.tolist()) <= {0, 1}
    targets = interact_only.node[interact_only.edge_index[1]]
    assert all(
        e in edges
        for e in zip(
            targets.tolist(),
            interact_only.relation.tolist(),
            interact_only.node[interact_only.edge_index[0]].tolist(),
            strict=True,
        )
    )

    table = {r: 2 for r in range(ckg.num_relations)}
    table[0] = [4, 1]
    out = NeighborSampler(ckg, [2, 2], seed=0, relations=table).sample(seeds)
    for hop in (0, 1):
        mine = out.hop == hop
        keys = out.edge_index[1][mine] * ckg.num_relations + out.relation[mine]
        counts = np.bincount(keys)
        limit = np.where(np.arange(len(counts)) % ckg.num_relations == 0, [4, 1][hop], 2)
        assert np.all(counts <= limit)
    # per relation, a node of hop 0 with >= 4 interact edges gets exactly 4 of them
    seed_interacts = np.array(
        [np.sum(ckg.relation[ckg.indptr[s] : ckg.indptr[s + 1]] == 0) for s in seeds]
    )
    got = np.bincount(
        out.edge_index[1][(out.hop == 0) & (out.relation == 0)], minlength=len(seeds)
    )[: len(seeds)]
    assert np.array_equal(got, np.minimum(seed_interacts, 4))


def test_to_torch_and_to_pyg(ckg):
    seeds = seeds_of(ckg, 16, 6)
    out = NeighborSampler(ckg, [4, 4], seed=0).sample(seeds)
    t = out.to_torch()
    assert t.node.dtype == t.edge_index.dtype == t.relation.dtype == t.hop.dtype == torch.int64
    assert torch.equal(t.edge_index, torch.from_numpy(out.edge_index))
    data = out.to_pyg()
    assert data.num_nodes == out.num_nodes and data.batch_size == 16
    assert (
        torch.equal(data.n_id, t.node)
        and torch.equal(data.edge_type, t.relation)
        and torch.equal(data.e_id, t.edge_id)
    )
    assert data.num_sampled_nodes == list(out.num_sampled_nodes)
    data.validate(raise_on_error=True)


@pytest.mark.parametrize(
    ("kwargs", "seeds", "message"),
    [
        ({"fanouts": [0]}, [1], "'fanouts' needs to be a non-empty list"),
        ({"fanouts": []}, [1], "'fanouts' needs to be a non-empty list"),
        ({"fanouts": [10], "relations": [99]}, [1], "relation 99"),
        ({"fanouts": [10, 10], "relations": {0: [1]}}, [1], "gives 1 fanouts for 2 hops"),
        ({"fanouts": [10]}, [10**9], "outside the graph"),
        ({"fanouts": [10]}, [[1, 2]], "1-D array"),
        ({"fanouts": [10]}, [3, 3], "duplicates"),
    ],
)
def test_bad_arguments_are_clear_errors(ckg, kwargs, seeds, message):
    with pytest.raises(KGDataError, match=message):
        NeighborSampler(ckg, **kwargs).sample(seeds)


def test_lazy_exports():
    assert kg_data.NeighborSampler is NeighborSampler and kg_data.SampledSubgraph is SampledSubgraph


def test_lfm1m_two_hop_sample(shared_data, tmp_path):
    raw = shared_data / "lfm1m-kgat"
    if not raw.is_dir():
        pytest.skip("lfm1m-kgat not in the shared data")
    ckg = CKG.from_dataset(
        kg_data.ingest(raw, tmp_path / "lfm1m", progress=False).path, cache=False
    )
    users = ckg.n_entities + np.arange(0, ckg.n_users, 7)
    out = NeighborSampler(ckg, [10, 10], seed=0).sample(users)
    targets, sources = out.node[out.edge_index[1]], out.node[out.edge_index[0]]
    assert np.array_equal(ckg.indices[out.edge_id], sources)
    assert np.all((out.edge_id >= ckg.indptr[targets]) & (out.edge_id < ckg.indptr[targets + 1]))
    assert len(np.unique(out.edge_id)) == out.num_edges
    assert np.all(np.bincount(out.edge_index[1]) <= 10)
    assert set(out.relation[out.hop == 0].tolist()) == {0}  # users only interact
