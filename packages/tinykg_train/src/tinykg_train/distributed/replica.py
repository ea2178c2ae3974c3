"""One worker's part in N-worker data-parallel training: what the trainer does differently when
`session.replica` is set.

Every worker runs the project's own loop (`trainer.train` -> `fit` -> `epoch.run_phase`); the hooks:

- `open_session` -> `attach`: check every worker opened the same data with the same settings, start
  from rank 0's weights, cut the batch sources to this worker's slices (sharding.py), evaluate on
  rank 0 only and broadcast the metrics, and give ranks > 0 their own random streams.
- `run_phase` -> `average_gradients` after each backward: the global batch's gradient and loss.
- `fit` -> `share_timings`: every rank's epoch seconds in the row (`epoch_seconds_rank1`, ...) and
  the seconds rank 0 spent in the gradient all-reduce, waits for the others included
  (`allreduce_seconds`).
- `save_session` -> `save`: rank 0 writes checkpoint.pt holding every rank's RNG state
  (`worker_rng`), then `report(metrics, checkpoint file)` runs on every rank (Ray Train's
  `ray.train.report` in worker.py).
- `restore` -> `rng_state`: this rank's RNG state from the checkpoint, so a resumed run draws what
  the uninterrupted one would have.

Nothing here imports Ray: the process group is whatever `torch.distributed` was initialized with.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tinykg_train.checkpoint import save_checkpoint, seed_everything
from tinykg_train.distributed.collective import (
    average_gradients,
    broadcast_object,
    broadcast_parameters,
    gather_objects,
)
from tinykg_train.distributed.sharding import ShardedBatches
from tinykg_train.errors import TinyKGError

# report(metrics of the epoch, the checkpoint file on rank 0 / None elsewhere)
Reporter = Callable[[dict[str, Any], Path | None], None]

WORKER_SEED_STRIDE = 1_000_003  # rank r > 0 seeds its dropout/noise with seed + r * stride


def worker_seed(seed: int, rank: int) -> int:
    """The seed of rank `rank`'s own draws; rank 0 keeps the run's seed."""
    return seed + rank * WORKER_SEED_STRIDE


class LeaderEvaluator:
    """Ranks a split on rank 0 only; every rank gets rank 0's metrics (early stopping stays in step)."""

    def __init__(self, evaluator: Any, is_leader: bool) -> None:
        self.evaluator, self.is_leader = evaluator, is_leader

    def evaluate(self, model: torch.nn.Module, split: str, **options: Any) -> dict[str, float]:
        metrics = self.evaluator.evaluate(model, split, **options) if self.is_leader else None
        return broadcast_object(metrics)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.evaluator, name)


@dataclass
class Replica:
    """Rank `rank` of `world_size` data-parallel workers (see the module docstring)."""

    rank: int
    world_size: int
    report: Reporter | None = None
    resume_from: Path | None = None  # a checkpoint file to resume from instead of the run dir's
    shard_rows: int = field(default=0, init=False)
    batch_rows: int = field(default=0, init=False)
    allreduce_seconds: float = field(default=0.0, init=False)  # this epoch's, so far

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    # -- open_session ----------------------------------------------------------------------------

    def attach(self, session) -> None:
        """Make a freshly opened session this worker's part of the data-parallel run."""
        self.check_same_run(session)
        broadcast_parameters(session.model)
        session.cf_batches = self.shard(session.cf_batches)
        if session.kg_batches is not None:
            session.kg_batches = self.shard(session.kg_batches)
        session.evaluator = LeaderEvaluator(session.evaluator, self.is_leader)
        if self.rank:  # after the model is built: the weights are drawn alike, the noise is not
            seed_everything(worker_seed(session.config.seed, self.rank))

    def shard(self, batches: Any) -> ShardedBatches:
        return ShardedBatches(batches, self.rank, self.world_size, self._on_shard)

    def _on_shard(self, kept_rows: int, batch_rows: int) -> None:
        self.shard_rows, self.batch_rows = kept_rows, batch_rows

    def check_same_run(self, session) -> None:
        """Refuse workers that opened different data or settings (e.g. a dataset path that holds
        other files on another node): they would silently train different things."""
        mine = (session.dataset.fingerprint, session.config.to_dict())
        seen = gather_objects(mine)
        for rank, theirs in enumerate(seen):
            if theirs[0] != seen[0][0]:
                raise TinyKGError(
                    f"worker {rank} read other data at {session.config.data} than worker 0 "
                    "(dataset fingerprints differ): put the dataset on storage every node reads"
                )
            if theirs[1] != seen[0][1]:
                raise TinyKGError(f"worker {rank} got other settings than worker 0")

    # -- training --------------------------------------------------------------------------------

    def average_gradients(self, model: torch.nn.Module, loss: torch.Tensor) -> torch.Tensor:
        """All-reduce this step's gradients (weighted by each worker's rows); the global batch's loss."""
        if self.batch_rows <= 0:
            raise TinyKGError("average_gradients needs a batch from this replica's shard()")
        start = time.perf_counter()
        loss = average_gradients(model.parameters(), loss, self.shard_rows / self.batch_rows)
        self.allreduce_seconds += time.perf_counter() - start
        return loss

    def share_timings(self, row: dict[str, Any]) -> None:
        """Add the other ranks' `epoch_seconds` to the epoch's row as `epoch_seconds_rank<r>`, and
        rank 0's `allreduce_seconds` (every rank's row gets the same numbers)."""
        timings = gather_objects((row["epoch_seconds"], self.allreduce_seconds))
        for rank, (seconds, _) in enumerate(timings):
            if rank:
                row[f"epoch_seconds_rank{rank}"] = seconds
        row["allreduce_seconds"] = timings[0][1]
        self.allreduce_seconds = 0.0

    # -- checkpoints -----------------------------------------------------------------------------

    def save(self, session, payload: dict[str, Any]) -> None:
        """Rank 0 writes `payload` plus every rank's RNG state; then every rank reports the epoch."""
        from tinykg_train.trainer import epoch_report

        states = gather_objects(payload["rng"])
        checkpoint = None
        if self.is_leader:
            checkpoint = save_checkpoint(session.run.checkpoint, {**payload, "worker_rng": states})
        if self.report is not None:
            self.report(epoch_report(session, session.state.history[-1]), checkpoint)

    def rng_state(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        """This rank's RNG state in a checkpoint written by `save`."""
        states = checkpoint.get("worker_rng") or []
        if len(states) != self.world_size:
            raise TinyKGError(
                f"the checkpoint holds the random states of {len(states)} worker(s), not "
                f"{self.world_size}: resume with the number of workers it was written with"
            )
        return states[self.rank]
