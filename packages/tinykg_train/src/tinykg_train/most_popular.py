"""The most-popular ranking: every user gets the items with the most training interactions.

Why: a trained recommender is only worth its memory when it beats this. A random ranking's
Recall@20 (20 / items) is a floor any model clears after a few steps; popularity is the bar a model
that learned nothing per user reaches, and on power-law data it is high. `MostPopular` is a
`Recommender` (`prepare_scoring`, `score_users`), so `RankingEvaluator` ranks it with the same users,
masks and metrics as a trained model; every training run ranks it on the test split beside the model
(`popularity_bar`, metrics.json's `most_popular`).
"""

from __future__ import annotations

import numpy as np
import torch


class MostPopular(torch.nn.Module):
    """Scores item i by its count of training interactions, the same for every user."""

    def __init__(self, item_counts: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("item_counts", item_counts.to(torch.float32))

    @classmethod
    def from_evaluator(cls, evaluator) -> MostPopular:
        """Counts of the train items a `RankingEvaluator` already holds (no second read of the
        split: 50M pairs at 100M triples + interactions)."""
        items = evaluator.split_items["train"].items
        counts = torch.from_numpy(np.bincount(items, minlength=evaluator.n_items))
        return cls(counts).to(evaluator.device)

    def prepare_scoring(self) -> None:
        """Nothing to propagate: the scores are the counts."""

    def score_users(self, users: torch.Tensor) -> torch.Tensor:
        """[len(users), items]: a fresh copy of the counts per user (the evaluator masks it in place)."""
        return self.item_counts.unsqueeze(0).repeat(len(users), 1)


def most_popular_metrics(
    data_dir, split: str = "test", *, ks=(20,), sample_users: int | None = None, seed: int = 0
) -> dict[str, float]:
    """Recall@K and NDCG@K of the most-popular ranking on `split` of the dataset at `data_dir`,
    over the users a training run with the same `--eval-users` and `--seed` ranks."""
    from kg_data import KGDataset
    from tinykg_train.evaluate import RankingEvaluator

    dataset = KGDataset.open(data_dir)
    evaluator = RankingEvaluator(dataset, ks, sample_users=sample_users, seed=seed)
    return popularity_bar(evaluator, split)


def popularity_bar(evaluator, split: str = "test") -> dict[str, float]:
    """The most-popular ranking's metrics on `split`, with the users, masks and Ks `evaluator`
    ranks a trained model with: the bar the model's own metrics are read against."""
    return evaluator.evaluate(MostPopular.from_evaluator(evaluator), split)
