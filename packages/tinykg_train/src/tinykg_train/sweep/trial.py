"""One sweep trial: `trainer.train` (the function `pipelines.train` runs) with Tune reporting and MLflow.

Tune calls `run_trial(params, setup=...)` in a worker process whose working directory it changed, so
every path here is absolute. The trial trains into `<sweep dir>/runs/<trial id>`; if that dir holds a
checkpoint (the sweep was interrupted and resumed), training continues from it and logs to the same
MLflow run. A trial that raises is marked FAILED in MLflow (with an `error` tag) and the exception goes
on to Tune, which records the trial as errored while the other trials carry on.

A trial with `workers: N` (N >= 2) is the driver of its own Ray Train run (Tune + Train, Ray 2.60's
way): its N data-parallel workers each reserve the trial's `resources`, the trial function itself
nothing; rank 0's epoch reports reach Tune through `distributed.tune.TuneEpochReports`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinykg_train.compression_defaults import width_label
from tinykg_train.config import TrainConfig
from tinykg_train.run_dir import RunDir
from tinykg_train.sweep.mlflow_runs import ERROR_TAG, STOPPED_TAG, SWEEP_TAG, TRIAL_TAG, error_line
from tinykg_train.sweep.reporting import StoppedByScheduler, TuneReporter
from tinykg_train.sweep.space import check_settings
from tinykg_train.sweep.spec import resolve_model_builder
from tinykg_train.tracking import MlflowTracker


@dataclass(frozen=True)
class TrialSetup:
    """What every trial of one sweep shares; handed to Tune with `tune.with_parameters`."""

    train: dict[str, Any]  # fixed TrainConfig settings, `data` absolute
    runs_dir: str  # absolute; trial t trains into runs_dir/t
    sweep_name: str
    tracking_uri: str  # absolute, reachable from every worker
    experiment_id: str
    parent_run_id: str
    model_builder: str | None = None
    cpus: float = 1.0  # per trial, or per Train worker of a trial with workers > 1
    gpus: float = 0.0

    def run_dir(self, trial_id: str) -> RunDir:
        return RunDir(Path(self.runs_dir) / trial_id)

    def tracker(self, trial_id: str, settings: Mapping[str, Any]) -> MlflowTracker:
        """The trial's MLflow child run: under the parent, named by its settings, tagged with its id."""
        return MlflowTracker(
            tracking_uri=self.tracking_uri,
            run_name=f"{trial_label(settings)}-{trial_id}",
            tags={SWEEP_TAG: self.sweep_name, TRIAL_TAG: trial_id},
            parent_run_id=self.parent_run_id,
            experiment_id=self.experiment_id,
        )


def trial_label(settings: Mapping[str, Any]) -> str:
    """A short readable name from a trial's settings, e.g. "kgat-int2-lr0.001-seed0" ("fp32": 32 bits)."""
    config = check_settings(settings, "trial")
    return f"{config.model}-{width_label(config.bits)}-lr{config.lr:g}-seed{config.seed}"


class TrialNamer:
    """Tune trial names and folder names: the readable label plus the trial id (picklable for restore)."""

    def __init__(self, fixed: Mapping[str, Any]) -> None:
        self.fixed = dict(fixed)

    def name(self, trial) -> str:
        return f"{trial_label({**self.fixed, **trial.config})}-{trial.trial_id}"

    __call__ = name


def trial_id_of(path: str | Path) -> str:
    """The trial id in a Tune trial folder named by `TrialNamer` ("<label>-<trial id>")."""
    return Path(path).name.rsplit("-", 1)[-1]


def trial_device(requested: str, gpu_ids: list) -> str:
    """`auto` follows the trial's reservation: a trial that reserved no GPU trains on the CPU.

    Ray hides no GPU from a worker that reserved none, so `auto` alone would put every trial on
    the node's GPUs, unaccounted for.
    """
    return "cpu" if requested == "auto" and not gpu_ids else requested


def trial_threads(requested: int | None, assigned_cpus: float | None) -> int | None:
    """Torch threads of a trial: `threads` when set, else the CPUs Ray gave the trial (at least 1,
    at most what this process may use); None (the trainer's auto choice) when Ray says nothing."""
    if requested is not None:
        return requested
    if not assigned_cpus:
        return None
    from tinykg_train.threads import available_cpus

    return max(1, min(int(assigned_cpus), available_cpus()))


@dataclass(frozen=True)
class TrialResources:
    """What Tune reserves for a trial (`tune.with_resources` calls it with the trial's settings)."""

    train: dict[str, Any]
    cpus: float
    gpus: float

    def __call__(self, params: Mapping[str, Any]) -> dict[str, float]:
        if int({**self.train, **params}.get("workers", 1)) > 1:
            # the trial only drives its Train workers, which reserve their own; Tune needs a
            # non-empty request, hence one byte of memory
            return {"cpu": 0, "gpu": 0, "memory": 1}
        return {"cpu": self.cpus, "gpu": self.gpus}


def train_on_workers(config: TrainConfig, tracker: MlflowTracker, setup: TrialSetup):
    """The trial's own Ray Train run (workers > 1): its result, rank 0's epochs reported to Tune."""
    from tinykg_train.distributed.launch import run_workers, workers_tracker
    from tinykg_train.distributed.tune import TuneEpochReports

    return run_workers(
        config,
        tracker=tracker,
        workers_tracker=workers_tracker(tracker),
        model_builder=setup.model_builder,
        use_gpu=setup.gpus > 0,
        cpus_per_worker=setup.cpus,
        gpus_per_worker=setup.gpus,
        callbacks=[TuneEpochReports(config.epochs)],
    )


def run_trial(params: Mapping[str, Any], setup: TrialSetup) -> None:
    """Train one trial; `params` are its sampled settings (the Tune trial config)."""
    import ray
    from ray import tune

    from tinykg_train.trainer import train

    trial_id = tune.get_context().get_trial_id()
    run_dir = setup.run_dir(trial_id)
    settings = {**setup.train, **params}
    if int(settings.get("workers", 1)) == 1:  # Train workers choose their own device
        gpus = ray.get_runtime_context().get_accelerator_ids().get("GPU", [])
        settings["device"] = trial_device(settings.get("device", "auto"), gpus)
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    settings["threads"] = trial_threads(settings.get("threads"), cpus)
    tracker = setup.tracker(trial_id, settings)
    config = TrainConfig.layered(  # the trial's model's defaults under train: and the axes
        {**settings, "out": str(run_dir.path), "resume": run_dir.checkpoint.exists()},
        source=f"trial {trial_id}",
    )

    reporter = TuneReporter(config.epochs)
    try:
        if config.workers > 1:
            result = train_on_workers(config, tracker, setup)
        else:
            builder = resolve_model_builder(setup.model_builder) if setup.model_builder else None
            result = train(
                config, tracker=tracker, on_epoch=reporter.on_epoch, model_builder=builder
            )
    except StoppedByScheduler:
        mark_stopped(tracker)
        raise SystemExit(0) from None  # what Tune's own report would have raised: end the thread
    except BaseException as exc:
        record_failure(tracker, config, run_dir, exc)
        raise
    reporter.final(result)


def mark_stopped(tracker: MlflowTracker) -> None:
    """The run of a trial ASHA stopped: KILLED with `stopped_by=asha` (the trainer had marked it FAILED)."""
    try:
        tracker.client.set_tag(tracker.run_id, STOPPED_TAG, "asha")
        tracker.client.set_terminated(tracker.run_id, status="KILLED")
    except Exception as problem:  # the driver settles the run if this is cut short
        print(f"could not mark the stopped trial in MLflow: {error_line(problem)}", file=sys.stderr)


def record_failure(
    tracker: MlflowTracker, config: TrainConfig, run_dir: RunDir, exc: BaseException
) -> None:
    """Make sure the trial has a FAILED run with the error as a tag, even if training never started it.

    Never raises: the training error is what Tune must see (an unreachable store is logged instead).
    """
    try:
        if tracker.run_id is None:
            tracker.start(config, run_dir.create(), "unknown (failed before training)")
            tracker.fail("FAILED")
        tracker.client.set_tag(tracker.run_id, ERROR_TAG, error_line(exc))
    except Exception as problem:  # reporting must not replace the real error
        print(f"could not record the failure in MLflow: {error_line(problem)}", file=sys.stderr)
