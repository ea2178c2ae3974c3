"""Recall@K / NDCG@K from cumulative sums against a slow, obviously-correct reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tinykg_train.metrics import metric_names, position_discounts, ranking_metrics


def reference_metrics(ranking: list[int], relevant: set[int], k: int) -> tuple[float, float]:
    """Recall@k and NDCG@k of one ranked list, straight from the definitions."""
    top = ranking[:k]
    found = sum(1 for item in top if item in relevant)
    dcg = 0.0
    for position, item in enumerate(top):
        if item in relevant:
            dcg += 1.0 / math.log2(position + 2)
    ideal = 0.0
    for position in range(min(len(relevant), k)):
        ideal += 1.0 / math.log2(position + 2)
    return found / len(relevant), dcg / ideal


def hits_of(
    rankings: list[list[int]], relevant: list[set[int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    hits = torch.tensor(
        [[item in rel for item in ranking] for ranking, rel in zip(rankings, relevant, strict=True)]
    )
    return hits, torch.tensor([len(rel) for rel in relevant])


HAND_MADE = [
    # (ranking, relevant items)
    ([5, 1, 7, 3, 9, 0], {1, 3}),  # hits at positions 1 and 3
    ([2, 4, 6, 8, 0, 1], {2, 4, 6}),  # perfect
    ([9, 8, 7, 6, 5, 4], {0, 1}),  # no hit
    ([0, 1, 2, 3, 4, 5], {5}),  # the only hit last
    ([3, 0, 1, 2, 4, 5], {3, 0, 1, 2, 4, 5, 11, 12}),  # more relevant items than positions
]


@pytest.mark.parametrize("k", [1, 2, 3, 4, 6])
def test_hand_made_rankings_agree_with_the_reference(k):
    rankings, relevant = zip(*HAND_MADE, strict=True)
    hits, n_relevant = hits_of(list(rankings), list(relevant))
    got = ranking_metrics(hits, n_relevant, [k])
    for user, (ranking, rel) in enumerate(HAND_MADE):
        recall, ndcg = reference_metrics(ranking, rel, k)
        assert got[f"recall@{k}"][user].item() == recall
        assert got[f"ndcg@{k}"][user].item() == pytest.approx(ndcg, rel=1e-13, abs=0)


def test_known_values_by_hand():
    hits, n_relevant = hits_of([[5, 1, 7, 3]], [{1, 3}])
    got = ranking_metrics(hits, n_relevant, [2, 4])
    assert got["recall@2"].item() == 0.5
    assert got["recall@4"].item() == 1.0
    # DCG@4 = 1/log2(3) + 1/log2(5); IDCG@4 = 1 + 1/log2(3)
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert got["ndcg@4"].item() == pytest.approx(expected, rel=1e-13)
    assert got["ndcg@2"].item() == pytest.approx(
        (1 / math.log2(3)) / (1 + 1 / math.log2(3)), rel=1e-13
    )


def test_perfect_ranking_scores_one_and_no_hit_scores_zero():
    hits = torch.tensor([[True] * 5 + [False] * 5, [False] * 10])
    got = ranking_metrics(hits, torch.tensor([5, 3]), [3, 5, 10])
    assert got["ndcg@3"].tolist() == [1.0, 0.0]
    assert got["ndcg@10"][0].item() == pytest.approx(1.0, rel=1e-15)
    assert got["recall@3"].tolist() == [0.6, 0.0]
    assert got["recall@10"].tolist() == [1.0, 0.0]


def test_random_rankings_agree_with_the_reference_for_many_k():
    rng = np.random.default_rng(7)
    n_items, length, ks = 60, 50, [1, 5, 10, 20, 50]
    rankings, relevant = [], []
    for _ in range(200):
        rankings.append(rng.permutation(n_items)[:length].tolist())
        relevant.append(
            set(rng.choice(n_items, size=int(rng.integers(1, 25)), replace=False).tolist())
        )
    hits, n_relevant = hits_of(rankings, relevant)
    got = ranking_metrics(hits, n_relevant, ks)
    assert set(got) == set(metric_names(ks))
    for user in range(len(rankings)):
        for k in ks:
            recall, ndcg = reference_metrics(rankings[user], relevant[user], k)
            assert got[f"recall@{k}"][user].item() == recall
            assert got[f"ndcg@{k}"][user].item() == pytest.approx(ndcg, rel=1e-12, abs=1e-15)


def test_position_discounts():
    assert position_discounts(3).tolist() == pytest.approx([1.0, 1 / math.log2(3), 0.5])


@pytest.mark.parametrize(
    ("hits", "n_relevant", "ks", "message"),
    [
        (
            torch.zeros(2, 5, dtype=torch.bool),
            torch.tensor([1, 1]),
            [10],
            "fewer than the largest K=10",
        ),
        (
            torch.zeros(2, 5, dtype=torch.bool),
            torch.tensor([1, 0]),
            [5],
            "at least one relevant item",
        ),
        (torch.zeros(5, dtype=torch.bool), torch.tensor([1]), [5], "needs shape"),
        (torch.zeros(2, 5, dtype=torch.bool), torch.tensor([1, 1]), [0], "positive cut-offs"),
    ],
)
def test_bad_arguments_are_refused(hits, n_relevant, ks, message):
    with pytest.raises(ValueError, match=message):
        ranking_metrics(hits, n_relevant, ks)
