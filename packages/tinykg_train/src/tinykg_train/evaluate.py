"""Full-ranking evaluation: every user against ALL items, known items masked, Recall/NDCG at many K.

For the valid split the user's training items are masked (score -inf); for the test split the training
and valid items are. Users are ranked in chunks of `batch_users`; each chunk takes one `topk` at the
largest K and `metrics.ranking_metrics` derives every smaller K from it. Users with no held-out item in
the split are skipped; a held-out item that is also a masked (known) item of the same user cannot be
ranked and is not counted as relevant.

Memory: a chunk's [users, n_items] work (the scores, masked in place, and the relevant-item flags,
`BLOCK_BYTES_PER_SCORE` bytes per score) is done in blocks of at most `block_bytes`, a chunk cut
into near-equal blocks of at least `MIN_BLOCK_USERS` users; only the [users, max K] hits of the chunk
are gathered. The numbers are the same for every `block_bytes`: a user's scores are one row of a
matrix product whose rows do not depend on how many rows it has (from `MIN_BLOCK_USERS` rows up, on
the CPU's BLAS; `tests/tinykg_train/test_evaluate.py` checks it), and the metrics are summed per chunk
as before.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from kg_data.index_dtype import narrow_index
from tinykg_train.allocator import release_freed_memory
from tinykg_train.metrics import ranking_metrics

EVAL_SPLITS = ("valid", "test")
#: Mixed into the seed of `sample_users`' draw, apart from every training stream.
USER_SAMPLE_STREAM = 0xE7A1
#: Default bound on one block's [users, n_items] work, in bytes.
DEFAULT_BLOCK_BYTES = 64 << 20
#: Bytes per (user, item) in a block: the float32 scores (masked in place) and a bool flag.
BLOCK_BYTES_PER_SCORE = 4 + 1
#: The fewest users a block is cut to (a matrix product of very few rows may round differently).
MIN_BLOCK_USERS = 128


def _takes_users(prepare_scoring) -> bool:
    """Whether a model's `prepare_scoring` takes the `users` it will be asked to score (the
    protocol's optional argument; a model written before it takes none)."""
    try:
        return "users" in inspect.signature(prepare_scoring).parameters
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return False


def block_sizes(n_users: int, n_items: int, block_bytes: int) -> list[int]:
    """Near-equal block sizes summing to `n_users`, each block's work within `block_bytes` where
    `MIN_BLOCK_USERS` users allow it (a chunk smaller than that stays one block)."""
    per_user = max(n_items, 1) * BLOCK_BYTES_PER_SCORE
    fit = max(block_bytes // per_user, MIN_BLOCK_USERS)
    blocks = max(-(-n_users // fit), 1)
    if n_users < blocks * MIN_BLOCK_USERS:
        blocks = max(n_users // MIN_BLOCK_USERS, 1)
    base, extra = divmod(n_users, blocks)
    return [base + 1] * extra + [base] * (blocks - extra)


@dataclass(frozen=True)
class UserItems:
    """The items of each user, CSR style: user u's items are `items[indptr[u]:indptr[u + 1]]`.

    Held for the whole run (the train split's are as many as the train interactions), so both are
    stored in the narrowest dtype of their values (`kg_data.index_dtype`); `gather` returns int64."""

    indptr: np.ndarray
    items: np.ndarray

    @classmethod
    def from_pairs(cls, pairs: np.ndarray, n_users: int) -> UserItems:
        """From (user, item) rows; users without rows get an empty slice."""
        order = np.argsort(pairs[:, 0], kind="stable")
        counts = np.bincount(pairs[:, 0], minlength=n_users)
        indptr = np.zeros(n_users + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return cls(narrow_index(indptr), narrow_index(pairs[order, 1]))

    def counts(self) -> np.ndarray:
        return np.diff(self.indptr).astype(np.int64)

    def gather(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, item) coordinates of the given users' items; `row` indexes into `users`."""
        starts = self.indptr[users].astype(np.int64)
        lengths = self.indptr[users + 1] - starts
        rows = np.repeat(np.arange(len(users)), lengths)
        offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return rows, self.items[np.repeat(starts, lengths) + offsets].astype(np.int64)


class RankingEvaluator:
    """Evaluates a `Recommender` (anything with `prepare_scoring()` and `score_users(users)`) on a split."""

    def __init__(
        self,
        dataset,
        ks: Sequence[int] = (20,),
        batch_users: int = 1024,
        device: torch.device | str = "cpu",
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        sample_users: int | None = None,
        seed: int = 0,
        release_heap: bool = False,
    ) -> None:
        """`release_heap`: hand the free heap back before each ranking (a big graph's run:
        `allocator.releases_between_phases`)."""
        self.ks = tuple(sorted(set(int(k) for k in ks)))
        self.sample_users, self.seed = sample_users, int(seed)
        self.release_heap = release_heap
        self.batch_users = int(batch_users)
        self.block_bytes = int(block_bytes)
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
        """The users evaluated on `split`: those with at least one held-out item there, or with
        `sample_users`, a sample of at most that many of them, drawn (sorted) by a generator seeded
        by `seed` and the split: the same users at every evaluation of a run."""
        users = np.flatnonzero(self.split_items[split].counts() > 0)
        if self.sample_users is None or self.sample_users >= len(users):
            return users
        rng = np.random.default_rng([self.seed, EVAL_SPLITS.index(split), USER_SAMPLE_STREAM])
        return np.sort(rng.choice(users, size=self.sample_users, replace=False))

    def _chunks(self, users: np.ndarray) -> Iterator[np.ndarray]:
        for start in range(0, len(users), self.batch_users):
            yield users[start : start + self.batch_users]

    def _coordinates(
        self, split: str, users: np.ndarray, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows, items = self.split_items[split].gather(users)
        return torch.from_numpy(rows).to(device), torch.from_numpy(items).to(device)

    @torch.no_grad()
    def evaluate(
        self,
        model,
        split: str,
        *,
        progress: bool = False,
        stage: Callable[[str], AbstractContextManager] | None = None,
    ) -> dict[str, float]:
        """Mean Recall@K and NDCG@K over the split's users, for every K (keys like "recall@20").

        `stage(name)`, when given, wraps the two stages, "propagation" (`prepare_scoring`) and
        "scoring" (the blocks), e.g. to measure each one's memory."""
        stage = stage or (lambda name: contextlib.nullcontext())
        if self.release_heap:  # what training freed, in pieces a ranking may not fit
            release_freed_memory()
        masked = self.masked_splits(split)
        users = self.users(split)
        was_training = model.training
        model.eval()
        with stage("propagation"):
            if _takes_users(model.prepare_scoring):  # only the ranked users' vectors
                model.prepare_scoring(users=torch.from_numpy(users).to(self.device))
            else:
                model.prepare_scoring()
        with stage("scoring"):
            metrics = self._rank_users(model, users, split, masked, progress)
        model.train(was_training)
        return metrics

    def _rank_users(self, model, users, split, masked, progress) -> dict[str, float]:
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
        return {name: (total / counted if counted else 0.0) for name, total in sums.items()}

    def _rank_chunk(
        self, model, users: np.ndarray, split: str, masked: tuple[str, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Ranked hit matrix [B, max K] and relevant-item counts [B] of one chunk of users, ranked
        in blocks of at most `block_bytes` of work."""
        sizes = block_sizes(len(users), self.n_items, self.block_bytes)
        if len(sizes) == 1:
            return self._rank_block(model, users, split, masked)
        blocks = np.split(users, np.cumsum(sizes)[:-1])
        hits, relevant = zip(*(self._rank_block(model, b, split, masked) for b in blocks), strict=True)
        return torch.cat(hits), torch.cat(relevant)

    def _rank_block(
        self, model, users: np.ndarray, split: str, masked: tuple[str, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Ranked hit matrix [B, max K] and relevant-item counts [B] of one block of users."""
        scores = model.score_users(torch.from_numpy(users).to(self.device))
        if scores.shape != (len(users), self.n_items):
            raise ValueError(
                f"score_users returned shape {tuple(scores.shape)}, expected {(len(users), self.n_items)}"
            )
        relevant = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
        held_out = self._coordinates(split, users, scores.device)
        relevant[held_out] = True
        # masked in place when the scores are this call's own (a fresh product): a copy of a
        # [users, n_items] block otherwise (128 MiB at 128 users and 250,000 items)
        if scores._base is not None or sys.getrefcount(scores) > 2:
            scores = scores.clone()  # the model may still hold them (a cache, a view of one)
        for known in masked:
            rows, items = self._coordinates(known, users, scores.device)
            scores[rows, items] = float("-inf")
            relevant[rows, items] = False
        depth = min(max(self.ks), self.n_items)
        top = scores.topk(depth, dim=1).indices
        hits = relevant.gather(1, top)
        if depth < max(self.ks):  # fewer items than K: the missing positions can hold no hit
            hits = torch.nn.functional.pad(hits, (0, max(self.ks) - depth), value=False)
        # held-out items still relevant after masking, counted per user (a user's items are
        # distinct): a sum over `relevant` would convert all of it to int64 first
        still = held_out[0][relevant[held_out]]
        return hits.cpu(), torch.bincount(still, minlength=len(users)).cpu()
