"""Each worker's slice of every global batch: N workers together see exactly what one worker sees.

Every worker draws the whole global batch from the same (seed, epoch) generator as a single worker
would, then keeps rows `[rows * r // N, rows * (r + 1) // N)`. The slices of one batch are disjoint
and cover it, so averaging the workers' gradients weighted by their share of the rows
(`Replica.average_gradients`) gives the gradient of the whole batch: the same step one worker
takes, up to float summation order and each worker's own dropout/noise draws.

A batch with fewer rows than workers (a short last batch) leaves some slices empty; such a worker
trains on the batch's last row with weight 0, so it still takes part in the gradient all-reduce but
adds nothing to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from tinykg_train.errors import TinyKGError


def shard_bounds(rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """The `[start, stop)` rows of worker `rank` in a batch of `rows` rows (contiguous, near equal)."""
    return rows * rank // world_size, rows * (rank + 1) // world_size


class ShardedBatches:
    """A batch source (`epoch(e)` and `len()`, e.g. `kg_data.BPRBatches`) cut to one worker's slices.

    `on_shard(kept_rows, batch_rows)` is called before each slice is yielded: the weight of the
    slice in the global batch is `kept_rows / batch_rows` (0 for the stand-in row of an empty slice).
    """

    def __init__(
        self,
        batches: Any,
        rank: int,
        world_size: int,
        on_shard: Callable[[int, int], None],
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside a world of {world_size} workers")
        self.batches, self.rank, self.world_size, self.on_shard = (
            batches,
            rank,
            world_size,
            on_shard,
        )

    def __len__(self) -> int:
        return len(self.batches)

    def epoch(self, epoch: int) -> Iterator[list[torch.Tensor]]:
        for batch in self.batches.epoch(epoch):
            yield self.slice(batch)

    def slice(self, batch: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """This worker's rows of one global batch (a sequence of tensors with equal first sizes)."""
        if not isinstance(batch, (list, tuple)) or not all(
            isinstance(t, torch.Tensor) for t in batch
        ):
            raise TinyKGError(
                f"data-parallel training splits batches of tensors, not {type(batch).__name__}: "
                "train this batch source with workers: 1"
            )
        rows = len(batch[0])
        start, stop = shard_bounds(rows, self.rank, self.world_size)
        if start == stop:  # fewer rows than workers: a stand-in row that adds nothing
            self.on_shard(0, rows)
            return [t[rows - 1 :] for t in batch]
        self.on_shard(stop - start, rows)
        return [t[start:stop] for t in batch]
