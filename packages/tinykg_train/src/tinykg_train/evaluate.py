"""Full-ranking evaluation: every user against ALL items, known items masked, Recall/NDCG at many K.

For the valid split the user's training items are masked (score -inf); for the test split the training
and valid items are. Users are scored in chunks of `batch_users` so memory stays at
[batch_users, n_items] scores; each chunk takes one `topk` at the largest K and `metrics.ranking_metrics`
derives every smaller K from it. Users with no held-out item in the split are skipped; a held-out item
that is also a masked (known) item of the same user cannot be ranked and is not counted as relevant.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from tinykg_train.metrics import ranking_metrics

EVAL_SPLITS = ("valid", "test")


@dataclass(frozen=True)
class UserItems:
    """The items of each user, CSR style: user u's items are `items[indptr[u]:indptr[u + 1]]`."""

    indptr: np.ndarray
    items: np.ndarray

    @classmethod
    def from_pairs(cls, pairs: np.ndarray, n_users: int) -> UserItems:
        """From (user, item) rows; users without rows get an empty slice."""
        order = np.argsort(pairs[:, 0], kind="stable")
        counts = np.bincount(pairs[:, 0], minlength=n_users)
        indptr = np.zeros(n_users + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return cls(indptr, pairs[order, 1].astype(np.int64, copy=False))

    def counts(self) -> np.ndarray:
        return np.diff(self.indptr)

    def gather(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, item) coordinates of the given users' items; `row` indexes into `users`."""
        starts = self.indptr[users]
        lengths = self.indptr[users + 1] - starts
        rows = np.repeat(np.arange(len(users)), lengths)
        offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return rows, self.items[np.repeat(starts, lengths) + offsets]


class RankingEvaluator:
    """Evaluates a `Recommender` (anything with `prepare_scoring()` and `score_users(users)`) on a split."""

    def __init__(
        self,
        dataset,
        ks: Sequence[int] = (20,),
        batch_users: int = 1024,
        device: torch.device | str = "cpu",
    ) -> None:
        self.ks = tuple(sorted(set(int(k) for k in ks)))
        self.batch_users = int(batch_users)
        self.device = torch.device(device)
        self.n_items = dataset.n_items
        self.split_items = {
            split: UserItems.from_pairs(dataset.pairs(split), dataset.n_users)
            for split in ("train", *EVAL_SPLITS)
        }

    def masked_splits(self, split: str) -> tuple[str, ...]:
        """The splits whose items count as known (masked) when ranking for `split`."""
        if split not in EVAL_SPLITS:
            raise ValueError(f"'split' needs to be one of {', '.join(EVAL_SPLITS)} (got {split!r})")
        return ("train",) if split == "valid" else ("train", "valid")

    def users(self, split: str) -> np.ndarray:
        """The users evaluated on `split`: those with at least one held-out item there."""
        return np.flatnonzero(self.split_items[split].counts() > 0)

    def _chunks(self, users: np.ndarray) -> Iterator[np.ndarray]:
        for start in range(0, len(users), self.batch_users):
            yield users[start : start + self.batch_users]

    def _coordinates(
        self, split: str, users: np.ndarray, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows, items = self.split_items[split].gather(users)
        return torch.from_numpy(rows).to(device), torch.from_numpy(items).to(device)

    @torch.no_grad()
    def evaluate(self, model, split: str, *, progress: bool = False) -> dict[str, float]:
        """Mean Recall@K and NDCG@K over the split's users, for every K (keys like "recall@20")."""
        masked = self.masked_splits(split)
        users = self.users(split)
        was_training = model.training
        model.eval()
        model.prepare_scoring()
        sums = {name: 0.0 for k in self.ks for name in (f"recall@{k}", f"ndcg@{k}")}
        counted = 0
        chunks = tqdm(
            self._chunks(users),
            total=-(-len(users) // self.batch_users),
            desc=f"eval {split}",
            leave=False,
            disable=not progress,
        )
        for chunk in chunks:
            hits, n_relevant = self._rank_chunk(model, chunk, split, masked)
            keep = n_relevant > 0
            for name, values in ranking_metrics(hits[keep], n_relevant[keep], self.ks).items():
                sums[name] += float(values.sum())
            counted += int(keep.sum())
        model.train(was_training)
        return {name: (total / counted if counted else 0.0) for name, total in sums.items()}

    def _rank_chunk(
        self, model, users: np.ndarray, split: str, masked: tuple[str, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Ranked hit matrix [B, max K] and relevant-item counts [B] of one chunk of users."""
        scores = model.score_users(torch.from_numpy(users).to(self.device))
        if scores.shape != (len(users), self.n_items):
            raise ValueError(
                f"score_users returned shape {tuple(scores.shape)}, expected {(len(users), self.n_items)}"
            )
        relevant = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
        relevant[self._coordinates(split, users, scores.device)] = True
        scores = scores.clone()
        for known in masked:
            rows, items = self._coordinates(known, users, scores.device)
            scores[rows, items] = float("-inf")
            relevant[rows, items] = False
        depth = min(max(self.ks), self.n_items)
        top = scores.topk(depth, dim=1).indices
        hits = relevant.gather(1, top)
        if depth < max(self.ks):  # fewer items than K: the missing positions can hold no hit
            hits = torch.nn.functional.pad(hits, (0, max(self.ks) - depth), value=False)
        return hits.cpu(), relevant.sum(dim=1).cpu()
