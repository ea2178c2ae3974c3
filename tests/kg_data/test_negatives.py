"""Negatives: never a positive / true triple, uniform over what is allowed, deterministic, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from kg_data import BPRNegativeSampler, KGDataset, KGNegativeSampler
from kg_data.errors import KGDataError
from kg_data.negatives import ExcludingSampler
from tests.chi_square import chi_square, chi_square_critical
from tests.widened import int_array_dtypes, widened


def test_value_at_rank_matches_brute_force():
    rng = np.random.default_rng(0)
    groups, values = rng.integers(0, 12, 200), rng.integers(0, 30, 200)
    sampler = ExcludingSampler(groups, values, 30)
    for group in range(13):  # group 12 excludes nothing
        allowed = sorted(set(range(30)) - set(values[groups == group].tolist()))
        ranks = np.arange(len(allowed))
        got = sampler.value_at_rank(np.full(len(allowed), group), ranks)
        assert got.tolist() == allowed
        assert sampler.excluded_count(np.array([group]))[0] == 30 - len(allowed)


def test_bpr_negatives_are_never_training_positives(tiny_dataset_dir):
    ds = KGDataset.open(tiny_dataset_dir)
    pairs = ds.pairs("train")
    sampler = BPRNegativeSampler(pairs, ds.n_items, seed=0)
    users = np.repeat(pairs[:, 0], 20)
    items = sampler.sample(users)
    assert items.dtype == np.int64 and items.min() >= 0 and items.max() < ds.n_items
    positives = pairs[:, 0] * ds.n_items + pairs[:, 1]
    assert not np.isin(users * ds.n_items + items, positives).any()
    valid = ds.pairs("valid")  # held-out items are legitimate negatives and do come up
    assert np.isin(users * ds.n_items + items, valid[:, 0] * ds.n_items + valid[:, 1]).any()


def test_bpr_negatives_are_uniform_over_the_non_positives():
    positives = [0, 3, 4, 9]
    pairs = np.array([[0, i] for i in positives] + [[1, 2]])
    items = BPRNegativeSampler(pairs, n_items=12, seed=1).sample(np.zeros(16_000, np.int64))
    counts = np.bincount(items, minlength=12)
    assert counts[positives].sum() == 0
    allowed = counts[np.setdiff1d(np.arange(12), positives)]
    assert chi_square(allowed) < chi_square_critical(len(allowed) - 1)
    # A sampler that draws uniform items and replaces positives by the next item is biased; caught.
    rng = np.random.default_rng(1)
    shifted = rng.integers(0, 12, 16_000)
    while np.isin(shifted, positives).any():
        shifted = np.where(np.isin(shifted, positives), (shifted + 1) % 12, shifted)
    biased = np.bincount(shifted, minlength=12)[np.setdiff1d(np.arange(12), positives)]
    assert chi_square(biased) > chi_square_critical(len(biased) - 1)


def test_bpr_dense_users_and_users_with_every_item():
    n_items = 50
    almost = np.array([[0, i] for i in range(n_items) if i != 17])
    sampler = BPRNegativeSampler(almost, n_items, seed=0)
    assert set(sampler.sample(np.zeros(100, np.int64)).tolist()) == {17}
    everything = np.array([[5, i] for i in range(n_items)])
    with pytest.raises(KGDataError, match="user 5 has every item as a training positive"):
        BPRNegativeSampler(everything, n_items, seed=0).sample(np.array([5]))


def test_bpr_same_seed_same_negatives_and_rng_override(tiny_dataset_dir):
    ds = KGDataset.open(tiny_dataset_dir)
    users = ds.pairs("train")[:, 0]
    a = BPRNegativeSampler.from_dataset(ds, seed=3).sample(users)
    b = BPRNegativeSampler.from_dataset(ds.path, seed=3).sample(users)
    c = BPRNegativeSampler.from_dataset(ds, seed=4).sample(users)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    sampler = BPRNegativeSampler.from_dataset(ds, seed=9)
    d = sampler.sample(users, rng=np.random.default_rng(7))
    e = sampler.sample(users, rng=np.random.default_rng(7))
    assert np.array_equal(d, e)


def test_bpr_bad_pairs():
    with pytest.raises(KGDataError, match=r"shape \(n, 2\)"):
        BPRNegativeSampler(np.zeros((3, 3)), 5)
    with pytest.raises(KGDataError, match="outside"):
        BPRNegativeSampler(np.array([[0, 7]]), 5)


def test_kg_negatives_are_never_true_triples_and_stay_in_the_relation_range(tiny_dataset_dir):
    ds = KGDataset.open(tiny_dataset_dir)
    triples = ds.triples_array()
    sampler = KGNegativeSampler(triples, ds.n_entities, seed=0)
    heads, relations = np.repeat(triples[:, 0], 5), np.repeat(triples[:, 1], 5)
    tails = sampler.sample(heads, relations)
    width = ds.n_entities
    true = (triples[:, 0] * ds.n_relations + triples[:, 1]) * width + triples[:, 2]
    assert not np.isin((heads * ds.n_relations + relations) * width + tails, true).any()
    in_range = np.isin(relations * width + tails, triples[:, 1] * width + triples[:, 2])
    assert in_range.all()


def test_kg_negatives_fall_back_to_all_entities_when_the_range_is_exhausted():
    # relation 0 has a single tail (entity 9), so (1, 0) has nothing left in its range.
    triples = np.array([[1, 0, 9], [2, 0, 9], [2, 1, 3], [4, 1, 5]])
    sampler = KGNegativeSampler(triples, n_entities=12, seed=0)
    tails = sampler.sample(np.full(500, 1), np.zeros(500, np.int64))
    assert 9 not in tails.tolist() and set(tails.tolist()) == set(range(12)) - {9}
    in_range = sampler.sample(np.full(200, 2), np.ones(200, np.int64))
    assert set(in_range.tolist()) == {5}  # range of relation 1 is {3, 5}; (2, 1, 3) is true
    full = np.array([[0, 0, t] for t in range(12)])
    with pytest.raises(KGDataError, match="head 0 links through relation 0 to every entity"):
        KGNegativeSampler(full, n_entities=12).sample(np.array([0]), np.array([0]))
    with pytest.raises(KGDataError, match="'relations' holds ids outside"):
        sampler.sample(np.array([0]), np.array([2]))


def test_kg_negatives_are_uniform_over_the_allowed_range():
    triples = np.array(
        [[0, 0, t] for t in (2, 5)] + [[h, 0, t] for h in (1, 3) for t in range(2, 12)]
    )
    tails = KGNegativeSampler(triples, n_entities=20, seed=5).sample(
        np.zeros(20_000, np.int64), np.zeros(20_000, np.int64)
    )
    counts = np.bincount(tails, minlength=20)
    allowed = [t for t in range(2, 12) if t not in (2, 5)]
    assert counts.sum() == counts[allowed].sum()
    assert chi_square(counts[allowed]) < chi_square_critical(len(allowed) - 1)


def test_kg_negatives_deterministic_by_seed(tiny_dataset_dir):
    triples = KGDataset.open(tiny_dataset_dir).triples_array()
    a = KGNegativeSampler.from_dataset(tiny_dataset_dir, seed=1).sample(
        triples[:, 0], triples[:, 1]
    )
    b = KGNegativeSampler.from_dataset(tiny_dataset_dir, seed=1).sample(
        triples[:, 0], triples[:, 1]
    )
    c = KGNegativeSampler.from_dataset(tiny_dataset_dir, seed=2).sample(
        triples[:, 0], triples[:, 1]
    )
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_samplers_hold_int32_arrays_and_draw_what_int64_arrays_draw(tiny_dataset_dir):
    ds = KGDataset.open(tiny_dataset_dir)
    pairs, triples = ds.pairs("train"), ds.triples_array()
    bpr = BPRNegativeSampler(pairs, ds.n_items, seed=2)
    kg = KGNegativeSampler(triples, ds.n_entities, seed=2)
    for sampler in (bpr, kg):
        assert set(int_array_dtypes(sampler).values()) == {np.dtype(np.int32)}
    users = np.repeat(pairs[:, 0], 3)
    wide_bpr = widened(bpr)
    assert np.array_equal(bpr.sample(users), wide_bpr.sample(users))  # the samplers' own streams
    assert np.array_equal(bpr.sample(users), wide_bpr.sample(users))
    heads, relations = np.repeat(triples[:, 0], 3), np.repeat(triples[:, 1], 3)
    wide_kg = widened(kg)
    for _ in range(2):
        assert np.array_equal(kg.sample(heads, relations), wide_kg.sample(heads, relations))


def test_keys_beyond_int32_are_kept_as_int32_values_and_draw_what_int64_keys_draw():
    # values below 2**31 from 5 groups: keys group * 2**31 + value reach 2**33; kept as the values
    # alone (int32), searched within each group's slice, they must give the int64 keys' answers
    rng = np.random.default_rng(4)
    groups, values = rng.integers(0, 5, 300), rng.integers(0, 40, 300)
    sampler = ExcludingSampler(groups, values, 2**31)
    flat = ExcludingSampler(groups, values, 2**31, segmented=False)
    assert set(int_array_dtypes(sampler).values()) == {np.dtype(np.int32)}
    assert int_array_dtypes(flat)["_keys"] == np.int64
    draws = np.repeat(np.arange(6), 500)  # group 5 excludes nothing
    got = sampler.draw(draws, 45, np.random.default_rng(8))
    assert np.array_equal(got, flat.draw(draws, 45, np.random.default_rng(8)))
    assert np.array_equal(got, widened(sampler).draw(draws, 45, np.random.default_rng(8)))
    assert not sampler.is_excluded(draws, got).any() and got.max() < 45
    queries = rng.integers(0, 45, len(draws))
    assert np.array_equal(sampler.is_excluded(draws, queries), flat.is_excluded(draws, queries))
    ranks = rng.integers(0, 5, len(draws))
    assert np.array_equal(sampler.value_at_rank(draws, ranks), flat.value_at_rank(draws, ranks))


@pytest.mark.parametrize("seed", range(4))
def test_segmented_and_flat_keys_give_the_same_draws_and_answers(seed):
    rng = np.random.default_rng(seed)
    groups, values = rng.integers(0, 300, 5000), rng.integers(0, 60, 5000)  # dense groups too
    segmented = ExcludingSampler(groups, values, 64, segmented=True)
    flat = ExcludingSampler(groups, values, 64, segmented=False)
    queried = rng.integers(0, 320, 4000)  # 20 groups that exclude nothing
    allowed = np.flatnonzero(flat.excluded_count(queried) < 64)
    queried = queried[allowed]
    for draw in range(3):
        assert np.array_equal(
            segmented.draw(queried, 64, np.random.default_rng(draw)),
            flat.draw(queried, 64, np.random.default_rng(draw)),
        )
    probes = rng.integers(0, 64, len(queried))
    assert np.array_equal(segmented.is_excluded(queried, probes), flat.is_excluded(queried, probes))


def test_segmented_search_is_searchsorted_within_each_slice():
    from kg_data.negatives import segmented_search

    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 40, 200)  # empty slices among them
    values = np.concatenate([np.sort(rng.integers(0, 30, n)) for n in lengths]).astype(np.int32)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    queries = rng.integers(-2, 33, len(lengths))
    for side in ("left", "right"):
        expected = [
            start + np.searchsorted(values[start:end], query, side=side)
            for start, end, query in zip(starts, ends, queries, strict=True)
        ]
        assert segmented_search(values, starts, ends, queries, side=side).tolist() == expected
    assert segmented_search(values[:0], np.zeros(3), np.zeros(3), np.ones(3)).tolist() == [0, 0, 0]


def test_int32_keys_answer_queries_beyond_int32_without_wrapping():
    sampler = ExcludingSampler(np.array([0, 1, 1]), np.array([2, 5, 7]), 1000)
    assert sampler.is_excluded(np.array([1]), np.array([5]))[0]  # key 1005
    # group 4294968, value 301: key 2**32 + 1005, which read as int32 would be 1005
    far = np.array([4294968])
    assert not sampler.is_excluded(far, np.array([301]))[0]
    assert sampler.excluded_count(far)[0] == 0
    assert sampler.value_at_rank(far, np.array([301]))[0] == 301


def test_the_fallback_keeps_only_exhausted_pairs_and_draws_what_the_whole_kg_s_would():
    """Pairs whose relation range is exhausted draw from all entities; the fallback sampler keeps
    only their true tails, and answers for them what one built from every triple answers."""
    rng = np.random.default_rng(0)
    heads, relations = rng.integers(0, 40, 600), rng.integers(0, 3, 600)
    tails = np.where(relations == 2, rng.integers(0, 3, 600), rng.integers(0, 60, 600))
    triples = np.unique(np.stack([heads, relations, tails], axis=1), axis=0)
    sampler = KGNegativeSampler(triples, n_entities=60, seed=0)
    pair = triples[:, 0] * 3 + triples[:, 1]
    whole = ExcludingSampler(pair, triples[:, 2], 60)
    kept_pairs = np.unique(sampler._anywhere._group_ids)
    assert 0 < len(kept_pairs) < len(np.unique(pair))  # relation 2's range (3 tails) runs out
    groups = np.repeat(kept_pairs, 50)
    a = sampler._anywhere.draw(groups, 60, np.random.default_rng(7))
    b = whole.draw(groups, 60, np.random.default_rng(7))
    assert np.array_equal(a, b)
