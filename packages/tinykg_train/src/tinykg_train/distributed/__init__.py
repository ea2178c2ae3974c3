"""Data-parallel training on Ray Train: N workers, each running the project's own training loop on
its slice of every batch, gradients all-reduced before each optimizer step.

`train_distributed(config)` is what `python -m pipelines.train --workers N` runs (launch.py); a
sweep trial with `workers: N` runs `run_workers` inside its Tune trial. Parts: `sharding` (each
worker's rows of a global batch), `collective` (the all-reduce and broadcasts), `replica` (the hooks
the trainer calls on a worker), `worker` (what each Ray Train worker runs), `launch` (the driver),
`tune` (epoch reports from the workers to Tune). See docs/distributed.md.
"""

from tinykg_train.distributed.launch import TrainingFailed, run_workers, train_distributed
from tinykg_train.distributed.replica import Replica
from tinykg_train.distributed.sharding import ShardedBatches, shard_bounds

__all__ = [
    "Replica",
    "ShardedBatches",
    "TrainingFailed",
    "run_workers",
    "shard_bounds",
    "train_distributed",
]
