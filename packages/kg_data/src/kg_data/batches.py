"""Mini-batch iterators that yield torch int64 tensors, reproducible per epoch.

`batches.epoch(e)` is a pure function of the iterator's `seed` and `e`: the shuffle and the
negatives come from a generator seeded with `(seed, e)`, so a run resumed at epoch `e` sees exactly
the batches it would have seen, and two seeds give different batches.

The pairs and triples are held for the whole run in the narrowest dtype that holds their ids
(`index_dtype.narrow_index`); each batch is widened to int64 as it is cut.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from kg_data.dataset import KGDataset
from kg_data.errors import KGDataError
from kg_data.graph import CKG, open_dataset
from kg_data.index_dtype import narrow_index
from kg_data.negatives import BPRNegativeSampler, KGNegativeSampler
from kg_data.sampling import NeighborSampler, SampledSubgraph


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of one epoch: seeded by the pair (seed, epoch), so (1, 0) and (0, 1) differ."""
    if not isinstance(epoch, (int, np.integer)) or epoch < 0:
        raise KGDataError(f"'epoch' needs to be a non-negative integer (got {epoch!r})")
    return np.random.default_rng([int(seed), int(epoch)])


def _int64_columns(rows: np.ndarray) -> list[np.ndarray]:
    """Each column of a batch's rows as its own contiguous int64 array: what the iterators yield,
    whatever narrower dtype the rows are held in."""
    return [np.ascontiguousarray(column, np.int64) for column in rows.T]


class _Batches:
    """Shared shuffling and batch slicing over `size` rows."""

    def __init__(self, size: int, batch_size: int, seed: int, drop_last: bool) -> None:
        if (
            not isinstance(batch_size, (int, np.integer))
            or isinstance(batch_size, bool)
            or batch_size < 1
        ):
            raise KGDataError(f"'batch_size' needs to be a positive integer (got {batch_size!r})")
        self.size, self.batch_size, self.seed, self.drop_last = (
            size,
            int(batch_size),
            int(seed),
            drop_last,
        )

    def __len__(self) -> int:
        full, rest = divmod(self.size, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def _chunks(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        order = narrow_index(rng.permutation(self.size))  # held for the epoch: int32, not int64
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            yield order[start : start + self.batch_size]


class BPRBatches(_Batches):
    """`(users, pos_items, neg_items)` over the train interactions; negatives are never a positive."""

    def __init__(
        self,
        dataset: str | os.PathLike | KGDataset,
        batch_size: int,
        seed: int = 0,
        *,
        drop_last: bool = False,
    ) -> None:
        ds = open_dataset(dataset)
        pairs = ds.pairs("train")
        self.negatives = BPRNegativeSampler(pairs, ds.n_items, seed)
        self.pairs = narrow_index(pairs)
        super().__init__(len(self.pairs), batch_size, seed, drop_last)

    def epoch(self, epoch: int) -> Iterator[tuple[Any, Any, Any]]:
        import torch

        rng = epoch_rng(self.seed, epoch)
        for rows in self._chunks(rng):
            users, items = _int64_columns(self.pairs[rows])
            negatives = self.negatives.sample(users, rng=rng)
            yield torch.from_numpy(users), torch.from_numpy(items), torch.from_numpy(negatives)


class KGBatches(_Batches):
    """`(heads, relations, tails, neg_tails)` over the KG triples, KG relation ids `0..n_relations-1`."""

    def __init__(
        self,
        dataset: str | os.PathLike | KGDataset,
        batch_size: int,
        seed: int = 0,
        *,
        drop_last: bool = False,
    ) -> None:
        ds = open_dataset(dataset)
        triples = ds.triples_array()
        self.negatives = KGNegativeSampler(triples, ds.n_entities, seed)
        self.triples = narrow_index(triples)
        super().__init__(len(self.triples), batch_size, seed, drop_last)

    def epoch(self, epoch: int) -> Iterator[tuple[Any, Any, Any, Any]]:
        import torch

        rng = epoch_rng(self.seed, epoch)
        for rows in self._chunks(rng):
            heads, relations, tails = _int64_columns(self.triples[rows])
            negatives = self.negatives.sample(heads, relations, rng=rng)
            yield tuple(torch.from_numpy(a) for a in (heads, relations, tails, negatives))


class SubgraphBatches(_Batches):
    """Batches of seed nodes (CKG node ids), each with its sampled subgraph (`SampledSubgraph` of tensors)."""

    def __init__(
        self,
        ckg: CKG,
        seeds: Sequence[int] | np.ndarray,
        batch_size: int,
        fanouts: Sequence[int] = (10, 10),
        seed: int = 0,
        *,
        replace: bool = False,
        relations: Sequence[int] | Mapping[int, int | Sequence[int]] | None = None,
        drop_last: bool = False,
    ) -> None:
        self.sampler = NeighborSampler(
            ckg, fanouts, replace=replace, seed=seed, relations=relations
        )
        self.seeds = self.sampler.check_seeds(seeds)
        super().__init__(len(self.seeds), batch_size, seed, drop_last)

    def epoch(self, epoch: int) -> Iterator[SampledSubgraph]:
        rng = epoch_rng(self.seed, epoch)
        for rows in self._chunks(rng):
            yield self.sampler.sample(self.seeds[rows], rng=rng).to_torch()
