"""What every Ray Train worker runs: `trainer.train` with a `Replica`, checkpoints through Ray Train.

`run_worker(loop_config)` is the `train_loop_per_worker` of the `TorchTrainer` (launch.py). Ray
Train has already joined the workers in a `torch.distributed` process group (gloo on the CPU, NCCL
on GPUs). Each epoch rank 0 writes the run dir's checkpoint.pt (the project's `weights_only` format,
with every rank's RNG state) and hands a copy to `ray.train.report`; every rank reports. When a
worker dies, Ray Train (`FailureConfig`) restarts the group and `ray.train.get_checkpoint()` gives
the latest registered checkpoint, which the workers resume from (the run dir's own when Ray
registered none yet: it registers one only after polling every worker's report, every 2 s).

Rank 0 also records where the workers run (`workers.json`: rank, host, pid) and alone writes the
run dir and the MLflow run; it returns `train`'s result, which becomes `Result.return_value`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tinykg_train.config import TrainConfig
from tinykg_train.distributed.collective import gather_objects
from tinykg_train.distributed.replica import Replica
from tinykg_train.run_dir import RunDir, write_json_atomic

WORKERS_FILE = "workers.json"
STAGING_DIR = ".ray_checkpoint"  # in the run dir: checkpoint.pt linked here for Ray to persist


class RayTrainReporter:
    """`Replica.report` for Ray Train: the epoch's numbers, and on rank 0 the checkpoint."""

    def __init__(self, run: RunDir) -> None:
        self.staging = run.path / STAGING_DIR

    def __call__(self, report: dict[str, Any], checkpoint: Path | None) -> None:
        import ray.train

        metrics = {
            key: value for key, value in report.items() if isinstance(value, (int, float, bool))
        }
        if checkpoint is None:
            ray.train.report(metrics)
            return
        folder = stage_checkpoint(checkpoint, self.staging)
        try:
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(str(folder)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def stage_checkpoint(checkpoint: Path, folder: Path) -> Path:
    """A fresh `folder` holding `checkpoint` (a hard link where possible) for Ray Train to copy."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    target = folder / checkpoint.name
    try:
        target.hardlink_to(checkpoint)
    except OSError:  # another filesystem
        shutil.copy2(checkpoint, target)
    return folder


@contextlib.contextmanager
def ray_checkpoint_file() -> Iterator[Path | None]:
    """checkpoint.pt of Ray Train's latest registered checkpoint (None before the first one)."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        yield None
        return
    with checkpoint.as_directory() as folder:
        yield Path(folder) / RunDir(folder).checkpoint.name


def record_workers(run: RunDir, rank: int) -> list[dict[str, Any]]:
    """Every rank's host and pid; rank 0 writes them to `workers.json` in the run dir."""
    workers = gather_objects({"rank": rank, "host": socket.gethostname(), "pid": os.getpid()})
    if rank == 0:
        write_json_atomic(run.path / WORKERS_FILE, workers)
    return workers


def worker_device(use_gpu: bool) -> str:
    """`cuda` on the GPU Ray Train assigned this worker, else `cpu` (a CPU worker may still see the
    node's GPUs: Ray hides none from a worker that reserved none)."""
    if not use_gpu:
        return "cpu"
    import ray.train.torch
    import torch

    torch.cuda.set_device(ray.train.torch.get_device())
    return "cuda"


def print_progress(report: dict[str, Any]) -> None:
    """Rank 0's line per epoch. Written to stdout directly: Ray Train reroutes `print` through its
    INFO logging, which the driver turns down."""
    recall = report.get("recall@20")
    others = [v for k, v in report.items() if k.startswith("epoch_seconds_rank")]
    line = (
        f"epoch {report['epoch'] + 1}: train loss {report['train_loss']:.4f}, "
        f"{report['epoch_seconds']:.2f} s ({report['allreduce_seconds']:.2f} in all-reduces; other "
        f"ranks: {', '.join(f'{s:.2f}' for s in others)} s)"
        + (f", valid recall@20 {recall:.4f}" if isinstance(recall, float) else "")
    )
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run_worker(loop_config: dict[str, Any]) -> dict[str, Any] | None:
    """Train this worker's part; rank 0 returns what metrics.json holds.

    `loop_config`: `config` (TrainConfig dict, absolute paths), `tracker` (an `MlflowTracker` for
    rank 0, or None), `model_builder` ("module:function" or None), `use_gpu`.
    """
    import ray.train

    from tinykg_train.trainer import train

    # Ray Train logs every report at INFO through a logger outside `ray.train` (its LoggingConfig
    # misses it): warnings and errors only in this worker
    logging.getLogger().setLevel(logging.WARNING)
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    config = TrainConfig.from_dict(loop_config["config"])
    run = RunDir(config.out)
    record_workers(run, rank)
    builder = None
    if loop_config.get("model_builder"):
        from tinykg_train.sweep.spec import resolve_model_builder

        builder = resolve_model_builder(loop_config["model_builder"])
    with ray_checkpoint_file() as resume_from:
        # The driver refused a run dir holding another run's checkpoint, so one found now is this
        # run's (a restart after a worker died) or the one --resume continues.
        resuming = config.resume or resume_from is not None or run.checkpoint.exists()
        config = config.with_overrides(
            device=worker_device(loop_config["use_gpu"]), resume=resuming
        )
        replica = Replica(rank, world_size, RayTrainReporter(run), resume_from)
        result = train(
            config,
            tracker=loop_config.get("tracker") if rank == 0 else None,
            on_epoch=print_progress if rank == 0 else None,
            model_builder=builder,
            replica=replica,
        )
    return result if rank == 0 else None
