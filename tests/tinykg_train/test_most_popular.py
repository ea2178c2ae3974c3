"""The most-popular baseline ranks each user's unseen items by training count."""

from __future__ import annotations

import pytest
import torch

from kg_data import KGDataset, ingest
from tinykg_train.evaluate import RankingEvaluator
from tinykg_train.most_popular import MostPopular, most_popular_metrics


@pytest.fixture(scope="module")
def counted_dir(tmp_path_factory):
    """Train counts: item 0 four times, 1 three, 2 two, 3 once, 4 and 5 never."""
    raw = tmp_path_factory.mktemp("popular_raw")
    (raw / "train.txt").write_text("0 0 1\n1 0 1 2\n2 0 2\n3 0 3\n4 1\n")
    (raw / "valid.txt").write_text("4 5\n")
    (raw / "test.txt").write_text("0 2\n1 3\n2 4\n3 1\n")
    (raw / "kg_final.txt").write_text("0 0 6\n1 0 7\n")
    return ingest(raw, tmp_path_factory.mktemp("popular_ds") / "ds", progress=False).path


def test_scores_are_the_train_counts_for_every_user(counted_dir):
    model = MostPopular.from_evaluator(RankingEvaluator(KGDataset.open(counted_dir)))
    scores = model.score_users(torch.tensor([0, 3]))
    assert scores.tolist() == [[4, 3, 2, 1, 0, 0]] * 2
    scores[0, 0] = -1  # the evaluator masks in place: a copy, not the counts
    assert model.item_counts[0] == 4


def test_each_user_gets_the_most_popular_item_they_have_not_seen(counted_dir):
    # user 0 knows {0,1}: top 2, a hit; user 1 knows {0,1,2}: top 3, a hit;
    # user 2 knows {0,2}: top 1, a miss (test item 4); user 3 knows {0,3}: top 1, a hit
    got = most_popular_metrics(counted_dir, ks=(1,))
    assert got == pytest.approx({"recall@1": 3 / 4, "ndcg@1": 3 / 4})


def test_a_sample_of_users_is_the_one_a_run_with_that_seed_ranks(counted_dir):
    dataset = KGDataset.open(counted_dir)
    for seed in range(4):
        users = RankingEvaluator(dataset, (1,), sample_users=2, seed=seed).users("test")
        hits = {0: 1.0, 1: 1.0, 2: 0.0, 3: 1.0}
        expected = sum(hits[int(u)] for u in users) / 2
        got = most_popular_metrics(counted_dir, ks=(1,), sample_users=2, seed=seed)
        assert got["recall@1"] == pytest.approx(expected)
