"""The driver side of data-parallel training: checks, the Ray connection, and the Ray Train run.

`train_distributed(config)` (what `pipelines.train --workers N` calls) checks every input before
anything starts (settings, dataset, run dir, MLflow store, the cluster address and its CPUs/GPUs),
connects to Ray like a sweep does (`--address`, `RAY_ADDRESS` inside `ray job submit`, else a
private local Ray removed afterwards), then `run_workers` runs a `TorchTrainer` whose N workers each
run worker.py's `run_worker`. A sweep trial with `workers: N` calls `run_workers` directly (Tune +
Train: the trial function is the Train driver).

Ray Train keeps its run state and copies of the checkpoints in `<run dir>/ray_train` (its
`storage_path`): on several machines the run dir must be on storage every node sees.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tinykg_train.config import TrainConfig
from tinykg_train.distributed.worker import run_worker
from tinykg_train.errors import ConfigError, TinyKGError
from tinykg_train.run_dir import RunDir

RAY_TRAIN_DIR = "ray_train"  # RunConfig(storage_path=<run dir>, name=RAY_TRAIN_DIR)
MAX_FAILURES = 2  # worker-group restarts from the last checkpoint before the run fails


class TrainingFailed(RuntimeError):
    """The Ray Train run failed after its restarts (not bad input: the CLI exits with status 1)."""


# -- checks before anything starts ---------------------------------------------------------------


def with_absolute_paths(config: TrainConfig) -> TrainConfig:
    """Workers run in a directory of Ray's choosing: give them absolute `data` and `out`."""
    return config.with_overrides(
        data=str(Path(config.data).resolve()) if config.data else "",
        out=str(Path(config.out).resolve()),
    )


def check_inputs(config: TrainConfig) -> None:
    """What `open_session` would refuse, refused here before Ray starts (same one-line errors)."""
    from kg_data import KGDataset
    from tinykg_train.checkpoint import load_checkpoint
    from tinykg_train.session import check_resumable, check_run_dir

    if config.workers < 2:
        raise ConfigError("data-parallel training needs workers >= 2; workers: 1 trains in-process")
    if os.environ.get("RAY_TRAIN_V2_ENABLED", "1").strip().lower() in ("0", "false", "no"):
        raise ConfigError("RAY_TRAIN_V2_ENABLED is off: unset it (training uses Ray Train V2)")
    if not config.data:
        raise ConfigError("no dataset given: pass --data DIR (a dir written by pipelines.ingest)")
    run = check_run_dir(config)
    dataset = KGDataset.open(config.data)
    if config.resume and run.checkpoint.exists():
        check_resumable(load_checkpoint(run.checkpoint), config, dataset, run.checkpoint)


def wants_gpu(config: TrainConfig, cluster_gpus: float) -> bool:
    """GPU workers for `device: cuda`, or for `auto` when the cluster has GPUs."""
    return config.device == "cuda" or (config.device == "auto" and cluster_gpus > 0)


def check_capacity(workers: int, use_gpu: bool, resources: dict[str, float], where: str) -> None:
    """Refuse more workers than the cluster can place (Ray Train would wait for them forever)."""
    needs = [("CPU", 1.0)] + ([("GPU", 1.0)] if use_gpu else [])
    for key, per_worker in needs:
        have = resources.get(key, 0.0)
        if workers * per_worker > have:
            raise ConfigError(
                f"--workers {workers} needs {workers * per_worker:g} {key}s (one per worker) but "
                f"{where} has {have:g}; lower --workers"
                + (" or train on the CPU (--device cpu)" if key == "GPU" else "")
            )


def local_resources() -> dict[str, float]:
    """What a private local Ray would get: the CPUs this process may use, the GPUs torch sees."""
    import torch

    return {"CPU": float(len(os.sched_getaffinity(0))), "GPU": float(torch.cuda.device_count())}


def workers_tracker(tracker):
    """A fresh copy of an `MlflowTracker` for rank 0 (picklable), its experiment created here once
    (a store that cannot be opened is a one-line error now, before Ray starts)."""
    if tracker is None:
        return None
    from tinykg_train.tracking import MlflowTracker, ensure_experiment, store_errors

    with store_errors(
        tracker.tracking_uri, "fix --tracking-uri / MLFLOW_TRACKING_URI or pass --no-mlflow"
    ):
        experiment_id = tracker.experiment_id or ensure_experiment(
            tracker.client, tracker.experiment, tracker.tracking_uri
        )
    tracker.experiment_id = experiment_id
    return MlflowTracker(
        tracking_uri=tracker.tracking_uri,
        experiment=tracker.experiment,
        run_name=tracker.run_name,
        tags=tracker.tags,
        parent_run_id=tracker.parent_run_id,
        experiment_id=experiment_id,
    )


# -- running -------------------------------------------------------------------------------------


def train_distributed(
    config: TrainConfig,
    *,
    address: str | None = None,
    tracker=None,
    model_builder: str | None = None,
    echo: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """Train with `config.workers` Ray Train workers; returns what metrics.json holds.

    `address`: a running Ray cluster (else `RAY_ADDRESS`, else a private local Ray for this run).
    `tracker`: an `MlflowTracker` whose run rank 0 writes (`tracker.run_id` is set afterwards).
    `model_builder`: "module:function" replacing `tinykg_train.models.build_model`, importable on
    every worker. Bad input raises ConfigError/TinyKGError before anything starts; a run that still
    fails after Ray Train's restarts raises `TrainingFailed`.
    """
    import ray

    from tinykg_train.sweep.cluster import check_reachable, in_ray_job, ray_connection

    config = with_absolute_paths(config)
    check_inputs(config)
    if model_builder:
        from tinykg_train.sweep.spec import resolve_model_builder

        resolve_model_builder(model_builder)
    on_cluster = bool(address) or in_ray_job()
    if on_cluster:
        check_reachable(address or os.environ["RAY_ADDRESS"])
    else:
        local = local_resources()
        check_capacity(config.workers, wants_gpu(config, local["GPU"]), local, "this machine")
    # Ray Train's INFO lines and the placement-group watcher's warnings (it needs a dashboard, which
    # the private local Ray lacks) would bury the workers' progress lines: errors only
    with ray_connection(address, log_level="ERROR") as where:
        resources = ray.cluster_resources()
        use_gpu = wants_gpu(config, resources.get("GPU", 0.0))
        check_capacity(config.workers, use_gpu, resources, f"the {where}")
        rank0_tracker = workers_tracker(tracker)  # the MLflow store is touched only from here on
        echo(f"training {config.model} on {config.workers} Ray Train workers ({where})")
        return run_workers(
            config,
            tracker=tracker,
            workers_tracker=rank0_tracker,
            model_builder=model_builder,
            use_gpu=use_gpu,
        )


def run_workers(
    config: TrainConfig,
    *,
    tracker=None,
    workers_tracker=None,
    model_builder: str | None = None,
    use_gpu: bool = False,
    cpus_per_worker: float = 1.0,
    gpus_per_worker: float = 1.0,
    callbacks: Sequence[Any] = (),
) -> dict[str, Any]:
    """Run the `TorchTrainer` on the connected Ray cluster (the caller checked the inputs).

    `tracker` is the caller's `MlflowTracker`: after the run its `run_id` is the run rank 0 wrote
    (so a caller can tag or close it); rank 0 itself gets `workers_tracker`, a fresh copy.
    """
    import ray.train
    from ray.train.torch import TorchTrainer

    run = RunDir(config.out)
    fresh = not run.path.exists()  # a failure before any checkpoint leaves no run dir behind
    resources = {"CPU": cpus_per_worker, **({"GPU": gpus_per_worker} if use_gpu else {})}
    trainer = TorchTrainer(
        run_worker,
        train_loop_config={
            "config": config.to_dict(),
            "tracker": workers_tracker,
            "model_builder": model_builder,
            "use_gpu": use_gpu,
        },
        scaling_config=ray.train.ScalingConfig(
            num_workers=config.workers, use_gpu=use_gpu, resources_per_worker=resources
        ),
        run_config=ray.train.RunConfig(
            name=RAY_TRAIN_DIR,
            storage_path=str(run.path),
            failure_config=ray.train.FailureConfig(max_failures=MAX_FAILURES),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=1),
            callbacks=list(callbacks),
            logging_config=ray.train.LoggingConfig(log_level="WARNING"),
        ),
    )
    try:
        result = trainer.fit()
    except ray.train.TrainingFailedError as exc:
        adopt_run(tracker, run)
        if tracker is not None and tracker.run_id is not None:
            tracker.fail("FAILED")
        if fresh and not run.checkpoint.exists():
            shutil.rmtree(run.path, ignore_errors=True)
        raise worker_error(exc) from None
    adopt_run(tracker, run)
    return result.return_value


def adopt_run(tracker, run: RunDir) -> None:
    """Point the driver's tracker at the MLflow run rank 0 created (recorded in the run dir)."""
    if tracker is not None and tracker.run_id is None:
        tracker.attach(run)


def worker_error(exc: BaseException) -> Exception:
    """The error to raise for a failed run: a worker's bad-input error as itself (one line), else
    `TrainingFailed` naming the first failing worker."""
    from kg_data.errors import KGDataError

    failures = sorted(getattr(exc, "worker_failures", {}).items())
    for rank, failure in failures:
        cause = getattr(failure, "cause", None) or failure
        if isinstance(cause, (TinyKGError, KGDataError)):
            family = KGDataError if isinstance(cause, KGDataError) else TinyKGError
            return family(f"worker {rank}: {first_line(cause)}")
    if failures:
        rank, failure = failures[0]
        detail = f"worker {rank}: {first_line(getattr(failure, 'cause', None) or failure)}"
    else:
        detail = first_line(exc)
    return TrainingFailed(
        f"data-parallel training failed after {MAX_FAILURES} restart(s) ({detail}); "
        "continue from the last checkpoint with --resume"
    )


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
