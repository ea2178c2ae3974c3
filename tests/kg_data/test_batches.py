"""Batch iterators: full coverage per epoch, torch int64, valid negatives, epochs pure in (seed, epoch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kg_data import CKG, BPRBatches, KGBatches, KGDataset, SubgraphBatches
from kg_data.batches import epoch_rng
from kg_data.errors import KGDataError
from tests.widened import int_array_dtypes, widened


def collect(batches, epoch: int) -> list[tuple[torch.Tensor, ...]]:
    return [tuple(b) for b in batches.epoch(epoch)]


def same(a: list[tuple[torch.Tensor, ...]], b: list[tuple[torch.Tensor, ...]]) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, y) for ba, bb in zip(a, b, strict=True) for x, y in zip(ba, bb, strict=True)
    )


def test_bpr_batches_cover_the_train_pairs_once_with_valid_negatives(tiny_dataset_dir):
    ds = KGDataset.open(tiny_dataset_dir)
    pairs = ds.pairs("train")
    batches = BPRBatches(ds, batch_size=256, seed=0)
    out = collect(batches, 0)
    assert len(out) == len(batches) == -(-len(pairs) // 256)
    users, items, negatives = (torch.cat(column).numpy() for column in zip(*out, strict=True))
    assert all(t.dtype == torch.int64 for batch in out for t in batch)
    assert sorted(zip(users.tolist(), items.tolist(), strict=True)) == sorted(
        map(tuple, pairs.tolist())
    )
    positives = pairs[:, 0] * ds.n_items + pairs[:, 1]
    assert not np.isin(users * ds.n_items + negatives, positives).any()
    assert not np.array_equal(users, pairs[:, 0])  # shuffled


def test_bpr_epochs_are_a_pure_function_of_seed_and_epoch(tiny_dataset_dir):
    a = BPRBatches(tiny_dataset_dir, batch_size=300, seed=1)
    b = BPRBatches(tiny_dataset_dir, batch_size=300, seed=1)
    collect(a, 0)  # consuming other epochs first changes nothing
    assert same(collect(a, 3), collect(b, 3))
    assert same(collect(a, 3), collect(a, 3))
    assert not same(collect(a, 0), collect(a, 1))
    assert not same(collect(a, 0), collect(BPRBatches(tiny_dataset_dir, batch_size=300, seed=2), 0))
    # seeds are combined as a pair: seed 1 epoch 0 is not seed 0 epoch 1
    assert not same(collect(a, 0), collect(BPRBatches(tiny_dataset_dir, batch_size=300, seed=0), 1))


def test_drop_last(tiny_dataset_dir):
    n = KGDataset.open(tiny_dataset_dir).n_interactions("train")
    batches = BPRBatches(tiny_dataset_dir, batch_size=1000, seed=0, drop_last=True)
    out = collect(batches, 0)
    assert len(out) == len(batches) == n // 1000
    assert all(len(batch[0]) == 1000 for batch in out)


def test_kg_batches(tiny_dataset_dir):
    ds = KGDataset.open(tiny_dataset_dir)
    triples = ds.triples_array()
    batches = KGBatches(ds, batch_size=500, seed=0)
    out = collect(batches, 0)
    heads, relations, tails, negatives = (
        torch.cat(column).numpy() for column in zip(*out, strict=True)
    )
    assert sorted(zip(heads.tolist(), relations.tolist(), tails.tolist(), strict=True)) == sorted(
        map(tuple, triples.tolist())
    )
    assert relations.max() < ds.n_relations
    width = ds.n_entities
    true = (triples[:, 0] * ds.n_relations + triples[:, 1]) * width + triples[:, 2]
    assert not np.isin((heads * ds.n_relations + relations) * width + negatives, true).any()
    assert same(out, collect(KGBatches(ds, batch_size=500, seed=0), 0))
    assert not same(out, collect(batches, 1))


@pytest.mark.parametrize("loader", [BPRBatches, KGBatches])
def test_batches_held_in_int32_are_those_of_int64_arrays(tiny_dataset_dir, loader):
    batches = loader(tiny_dataset_dir, batch_size=300, seed=4)
    assert set(int_array_dtypes(batches).values()) == {np.dtype(np.int32)}
    wide = widened(batches)
    assert set(int_array_dtypes(wide).values()) == {np.dtype(np.int64)}
    for epoch in (0, 3):
        out = collect(batches, epoch)
        assert all(t.dtype == torch.int64 for batch in out for t in batch)
        assert same(out, collect(wide, epoch))  # torch.equal: the values, whatever the dtypes


def test_subgraph_batches(tiny_dataset_dir):
    ckg = CKG.from_dataset(tiny_dataset_dir)
    seeds = ckg.n_entities + np.arange(ckg.n_users)
    batches = SubgraphBatches(ckg, seeds, batch_size=64, fanouts=[5, 5], seed=0)
    out = list(batches.epoch(0))
    assert len(out) == len(batches) == -(-ckg.n_users // 64)
    covered = torch.cat([sub.node[: sub.num_seeds] for sub in out])
    assert sorted(covered.tolist()) == seeds.tolist()
    assert all(
        sub.edge_index.dtype == torch.int64 and int(sub.edge_index.max()) < sub.num_nodes
        for sub in out
    )
    again = list(SubgraphBatches(ckg, seeds, batch_size=64, fanouts=[5, 5], seed=0).epoch(0))
    assert all(
        torch.equal(x.edge_index, y.edge_index) and torch.equal(x.node, y.node)
        for x, y in zip(out, again, strict=True)
    )
    other = list(batches.epoch(1))
    assert not torch.equal(out[0].node, other[0].node)


@pytest.mark.parametrize("batch_size", [0, -3, 2.5, True])
def test_bad_batch_size(tiny_dataset_dir, batch_size):
    with pytest.raises(KGDataError, match="'batch_size' needs to be a positive integer"):
        BPRBatches(tiny_dataset_dir, batch_size=batch_size)


def test_bad_epoch():
    with pytest.raises(KGDataError, match="'epoch' needs to be a non-negative integer"):
        epoch_rng(0, -1)
