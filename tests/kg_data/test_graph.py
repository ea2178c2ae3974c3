"""The collaborative KG: ids and CSR against a plain-Python reference, the cache, KGCN neighbor tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import kg_data
from kg_data import CKG, KGDataset, kg_neighbor_table
from kg_data.errors import KGDataError
from kg_data.graph import CACHE_DIR


def write_kgat(
    raw: Path,
    train: dict[int, list[int]],
    test: dict[int, list[int]],
    triples: list[tuple[int, int, int]],
    n_entities: int,
) -> Path:
    """A hand-made KGAT raw dir; `entity_list.txt` sizes the entity space (so isolated entities exist)."""
    raw.mkdir(parents=True)
    for name, lines in (("train.txt", train), ("test.txt", test)):
        (raw / name).write_text(
            "".join(f"{u} {' '.join(map(str, items))}\n" for u, items in lines.items())
        )
    (raw / "kg_final.txt").write_text("".join(f"{h} {r} {t}\n" for h, r, t in triples))
    (raw / "entity_list.txt").write_text(
        "org_id remap_id\n" + "".join(f"e{i} {i}\n" for i in range(n_entities))
    )
    return raw


def hand_dataset(tmp_path: Path) -> Path:
    """3 users, 4 items, entities 0..7 (entity 7 isolated), 2 KG relations."""
    raw = write_kgat(
        tmp_path / "raw",
        train={0: [0, 1], 1: [1, 2, 3], 2: [3]},
        test={0: [2], 1: [0], 2: [1]},
        triples=[(0, 0, 4), (1, 0, 4), (2, 1, 5), (3, 1, 6), (4, 1, 6), (0, 1, 5)],
        n_entities=8,
    )
    return kg_data.ingest(raw, tmp_path / "ds", progress=False).path


def reference_edges(ds: KGDataset) -> dict[int, list[tuple[int, int]]]:
    """Every node's sorted (relation, neighbor) list, built row by row in plain Python."""
    rows = ds.interactions("train").collect().to_dicts()
    triples = ds.triples().collect().to_dicts()
    n_e, n_r = ds.n_entities, ds.n_relations
    edges: dict[int, set[tuple[int, int]]] = {}
    for row in rows:
        user = n_e + row["user"]
        edges.setdefault(user, set()).add((0, row["item"]))
        edges.setdefault(row["item"], set()).add((1, user))
    for t in triples:
        edges.setdefault(t["head"], set()).add((2 + t["relation"], t["tail"]))
        edges.setdefault(t["tail"], set()).add((2 + n_r + t["relation"], t["head"]))
    return {node: sorted(pairs) for node, pairs in edges.items()}


def csr_rows(ckg: CKG) -> dict[int, list[tuple[int, int]]]:
    out = {}
    for node in range(ckg.num_nodes):
        lo, hi = ckg.indptr[node], ckg.indptr[node + 1]
        if hi > lo:
            out[node] = list(
                zip(ckg.relation[lo:hi].tolist(), ckg.indices[lo:hi].tolist(), strict=True)
            )
    return out


def test_csr_equals_python_reference_on_tiny_dataset(tiny_dataset_dir):
    ds = KGDataset.open(tiny_dataset_dir)
    ckg = CKG.build(ds)
    assert csr_rows(ckg) == reference_edges(ds)
    assert ckg.num_nodes == ds.n_entities + ds.n_users
    assert ckg.num_relations == 2 + 2 * ds.n_relations
    assert (ckg.n_entities, ckg.n_users, ckg.n_items, ckg.n_kg_relations) == (
        ds.n_entities,
        ds.n_users,
        ds.n_items,
        ds.n_relations,
    )
    assert ckg.indptr.dtype == ckg.indices.dtype == ckg.relation.dtype == np.int64


def test_relation_ids_follow_the_kgat_convention(tmp_path):
    ckg = CKG.from_dataset(hand_dataset(tmp_path))
    edges = set(zip(*ckg.coo(), strict=True))  # (h, t, rel)
    n_e = ckg.n_entities
    assert (n_e, n_e + 3) == (8, 11) and ckg.num_relations == 6
    assert (n_e + 1, 2, 0) in edges and (
        2,
        n_e + 1,
        1,
    ) in edges  # user 1 interacts with item 2, and back
    assert (n_e + 0, 2, 0) not in edges  # (0, 2) is a test interaction: not in the graph
    assert (2, 5, 3) in edges and (5, 2, 5) in edges  # triple (2, r=1, 5) and its inverse 2 + 2 + 1
    assert ckg.degree[7] == 0  # the isolated entity
    assert ckg.num_edges == 2 * 6 + 2 * 6


def test_from_dataset_caches_and_second_open_skips_the_build(tmp_path, monkeypatch):
    path = hand_dataset(tmp_path)
    first = CKG.from_dataset(path)
    cached = list((path / CACHE_DIR).iterdir())
    assert len(cached) == 1 and cached[0].suffix == ".npz"

    def no_build(ds):
        raise AssertionError("built again despite a valid cache")

    monkeypatch.setattr(CKG, "build", classmethod(lambda cls, ds: no_build(ds)))
    second = CKG.from_dataset(KGDataset.open(path))
    assert np.array_equal(first.indptr, second.indptr) and np.array_equal(
        first.indices, second.indices
    )
    assert np.array_equal(first.relation, second.relation) and first.num_nodes == second.num_nodes


def test_cache_is_invalidated_when_the_data_changes(tmp_path):
    path = hand_dataset(tmp_path)
    before = CKG.from_dataset(path)
    interactions = pl.read_parquet(path / "interactions.parquet")
    interactions.filter(~((pl.col("user") == 1) & (pl.col("item") == 2))).write_parquet(
        path / "interactions.parquet"
    )
    after = CKG.from_dataset(path)
    assert after.num_edges == before.num_edges - 2
    assert len(list((path / CACHE_DIR).glob("*.npz"))) == 2
    assert not list((path / CACHE_DIR).glob(".*tmp"))  # nothing half-written left behind


def test_unreadable_cache_is_a_clear_error(tmp_path):
    path = hand_dataset(tmp_path)
    CKG.from_dataset(path)
    (cache_file,) = (path / CACHE_DIR).iterdir()
    cache_file.write_bytes(b"not an npz")
    with pytest.raises(KGDataError, match="delete it"):
        CKG.from_dataset(path)
    assert CKG.from_dataset(path, cache=False).num_edges == 24


def test_to_torch_gives_int64_tensors_in_message_passing_orientation(tiny_dataset_dir):
    ckg = CKG.from_dataset(tiny_dataset_dir)
    tensors = ckg.to_torch()
    heads, tails, relations = ckg.coo()
    assert (
        tensors.edge_index.dtype
        == tensors.indptr.dtype
        == tensors.relation.dtype
        == tensors.indices.dtype
    )
    assert str(tensors.edge_index.dtype) == "torch.int64"
    assert np.array_equal(tensors.edge_index[0].numpy(), tails) and np.array_equal(
        tensors.edge_index[1].numpy(), heads
    )
    assert np.array_equal(tensors.relation.numpy(), relations)
    assert (tensors.num_nodes, tensors.num_relations) == (ckg.num_nodes, ckg.num_relations)


def test_kg_neighbor_table(tmp_path):
    path = hand_dataset(tmp_path)
    ds = KGDataset.open(path)
    undirected = {}
    for h, r, t in ds.triples_array().tolist():
        undirected.setdefault(h, set()).add((t, r))
        undirected.setdefault(t, set()).add((h, r))
    neighbors, relations = kg_neighbor_table(path, 2, seed=0)
    assert neighbors.shape == relations.shape == (8, 2)
    for entity in range(8):
        row = list(zip(neighbors[entity].tolist(), relations[entity].tolist(), strict=True))
        known = undirected.get(entity, set())
        if not known:
            assert row == [(entity, 0), (entity, 0)]  # isolated: points to itself
        else:
            assert set(row) <= known
            if len(known) >= 2:
                assert len(set(row)) == 2  # enough neighbors: distinct ones
    again, _ = kg_neighbor_table(path, 2, seed=0)
    assert np.array_equal(neighbors, again)
    with pytest.raises(KGDataError, match="'k' needs to be a positive integer"):
        kg_neighbor_table(path, 0, seed=0)


def test_kg_neighbor_table_draws_with_replacement_below_k(tiny_dataset_dir):
    ds = KGDataset.open(tiny_dataset_dir)
    neighbors, _ = kg_neighbor_table(ds, 64, seed=1)
    triples = ds.triples_array()
    degree = np.bincount(np.concatenate([triples[:, 0], triples[:, 2]]), minlength=ds.n_entities)
    low = np.flatnonzero((degree > 0) & (degree < 64))
    assert len(low) > 0
    distinct = np.array([len(set(row)) for row in neighbors[low].tolist()])
    assert np.all(distinct <= degree[low])


def test_lfm1m_graph_sizes(shared_data, tmp_path):
    raw = shared_data / "lfm1m-kgat"
    if not raw.is_dir():
        pytest.skip("lfm1m-kgat not in the shared data")
    ds = KGDataset.open(kg_data.ingest(raw, tmp_path / "lfm1m", progress=False).path)
    ckg = CKG.from_dataset(ds)
    assert ckg.num_nodes == 27_580 + 5_941
    assert ckg.num_relations == 14
    assert ckg.num_edges == 2 * 738_345 + 2 * 70_953  # the data holds no duplicate edge
    heads, tails, rels = ckg.coo()
    interact = rels == 0
    assert np.all(heads[interact] >= ckg.n_entities) and np.all(tails[interact] < ckg.n_items)
    shutil.rmtree(ds.path / CACHE_DIR)
