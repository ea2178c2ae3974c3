"""`run_sweep`: the driver of a sweep — MLflow parent run, Ray Tune trials, then the outcome.

The sweep dir `<out>/<name>` is Tune's experiment dir; beside Tune's files it holds `sweep.json`
(spec, dataset, tracking URI, MLflow ids: what `--resume` needs), `runs/<trial id>/` (each trial's run
dir), `summary.csv`, `summary.txt` and `pareto.png` (also logged to the parent run; see outcome.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinykg_train.errors import ConfigError
from tinykg_train.run_dir import write_json_atomic
from tinykg_train.sweep.cluster import (
    check_connection_args,
    check_resources,
    in_ray_job,
    ray_connection,
)
from tinykg_train.sweep.mlflow_runs import client_for, start_parent_run
from tinykg_train.sweep.outcome import SweepOutcome, summarize, trial_outcomes
from tinykg_train.sweep.reporting import STOP_METRIC
from tinykg_train.sweep.spec import SweepSpec
from tinykg_train.sweep.trial import TrialNamer, TrialResources, TrialSetup, run_trial
from tinykg_train.tracking import (
    absolute_uri,
    default_tracking_uri,
    ensure_experiment,
    store_errors,
)

STATE_FILE = "sweep.json"


@dataclass(frozen=True)
class SweepPlan:
    """Where a sweep writes and tracks; stored in sweep.json so `--resume` finds the same places."""

    spec: SweepSpec
    data: Path
    experiment_dir: Path
    tracking_uri: str

    @property
    def state_path(self) -> Path:
        return self.experiment_dir / STATE_FILE


def plan_sweep(
    spec: SweepSpec,
    data: str | Path | None,
    out: str | Path,
    tracking_uri: str | None,
    resume: bool,
) -> tuple[SweepPlan, dict[str, Any] | None]:
    """Resolve paths and the tracking URI; on `resume`, load and check the saved state."""
    experiment_dir = Path(out).resolve() / spec.name
    state_path = experiment_dir / STATE_FILE
    saved = None
    if resume:
        if not state_path.is_file():
            raise ConfigError(
                f"{experiment_dir}: no sweep to resume there (no {STATE_FILE}); check --out and the sweep name"
            )
        saved = json.loads(state_path.read_text())
        _check_resumable(spec, saved, experiment_dir)
        data = data or saved["data"]
    elif state_path.exists():
        raise ConfigError(
            f"{experiment_dir} already holds a sweep: pass --resume to continue it, or choose another --out or name"
        )
    if not data:
        raise ConfigError("--data is required: the dataset dir written by pipelines.ingest")
    data = Path(data).resolve()
    from kg_data import KGDataset

    KGDataset.open(data)  # a bad dataset dir is one line now, not a failure in every trial
    uri = absolute_uri(tracking_uri or default_tracking_uri())
    if saved is not None:
        for key, now in (("data", str(data)), ("tracking_uri", uri)):
            if saved[key] != now:
                raise ConfigError(
                    f"{experiment_dir}: the sweep used {key} {saved[key]} (now {now}); resume with the original"
                )
    return SweepPlan(spec, data, experiment_dir, uri), saved


def _check_resumable(spec: SweepSpec, saved: dict[str, Any], where: Path) -> None:
    before = SweepSpec.from_dict(saved["spec"]).trial_defining()
    now = spec.trial_defining()
    changed = sorted(key for key in now if before[key] != now[key])
    if changed:
        details = "; ".join(f"{key}: {before[key]} -> {now[key]}" for key in changed)
        raise ConfigError(
            f"{where}: cannot resume with other trial settings ({details}); rerun with the original options"
        )


def build_tuner(plan: SweepPlan, setup: TrialSetup, restore: bool):
    """A Tune `Tuner` for the plan (or one restored from the sweep dir, unfinished trials resumed)."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    spec = plan.spec
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, setup=setup),
        TrialResources(setup.train, spec.cpus_per_trial, spec.gpus_per_trial),
    )
    if restore and tune.Tuner.can_restore(str(plan.experiment_dir)):
        return tune.Tuner.restore(
            str(plan.experiment_dir), trainable, resume_unfinished=True, resume_errored=False
        )
    scheduler = None
    if spec.asha is not None:
        scheduler = ASHAScheduler(
            time_attr="epoch",
            max_t=spec.max_epochs,
            grace_period=spec.asha.grace_period,
            reduction_factor=spec.asha.reduction_factor,
        )
    namer = TrialNamer(setup.train)
    return tune.Tuner(
        trainable,
        param_space=spec.param_space(),
        tune_config=tune.TuneConfig(
            metric=STOP_METRIC,
            mode="max",
            scheduler=scheduler,
            # the generator caps concurrency itself (Tune ignores max_concurrent_trials beside it)
            search_alg=BasicVariantGenerator(
                random_state=spec.search_seed, max_concurrent=spec.max_concurrent or 0
            ),
            num_samples=spec.num_samples,
            trial_name_creator=namer,
            trial_dirname_creator=namer,
        ),
        run_config=tune.RunConfig(
            name=spec.name,
            storage_path=str(plan.experiment_dir.parent),
            failure_config=tune.FailureConfig(max_failures=0),
            verbose=1,
        ),
    )


def open_parent_run(client, plan: SweepPlan, saved: dict[str, Any] | None) -> tuple[str, str]:
    """(experiment id, parent run id): reopened on resume, else created and saved in sweep.json."""
    if saved is not None:
        client.update_run(saved["parent_run_id"], status="RUNNING")
        return saved["experiment_id"], saved["parent_run_id"]
    spec = plan.spec
    experiment_id = ensure_experiment(client, spec.experiment, plan.tracking_uri)
    parent_run_id = start_parent_run(
        client, experiment_id, spec.name, {**spec.to_dict(), "data": str(plan.data)}
    )
    plan.experiment_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        plan.state_path,
        {
            "spec": spec.to_dict(),
            "data": str(plan.data),
            "tracking_uri": plan.tracking_uri,
            "experiment_id": experiment_id,
            "parent_run_id": parent_run_id,
        },
    )
    return experiment_id, parent_run_id


def run_sweep(
    spec: SweepSpec,
    data: str | Path | None,
    out: str | Path,
    *,
    tracking_uri: str | None = None,
    address: str | None = None,
    resume: bool = False,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    echo: Callable[[str], Any] = print,
) -> SweepOutcome:
    """Run (or with `resume`, continue) a sweep; returns the outcome with its summary table."""
    check_connection_args(address, num_cpus, num_gpus)
    plan, saved = plan_sweep(spec, data, out, tracking_uri, resume)
    default_uri = tracking_uri is None and not os.environ.get("MLFLOW_TRACKING_URI")
    if in_ray_job() and (not Path(out).is_absolute() or default_uri):
        echo(
            "note: inside a Ray job a relative --out or the default tracking URI points into the job's "
            f"copy of the working dir ({plan.experiment_dir}, {plan.tracking_uri}); pass an absolute "
            "--out and MLFLOW_TRACKING_URI to keep the results"
        )
    with store_errors(plan.tracking_uri):
        client = client_for(plan.tracking_uri)
        experiment_id, parent_run_id = open_parent_run(client, plan, saved)
    outcome = SweepOutcome(plan.experiment_dir, plan.tracking_uri, experiment_id, parent_run_id)
    echo(spec.describe())
    echo(f"MLflow: {plan.tracking_uri}, experiment {spec.experiment!r}, parent run {parent_run_id}")
    setup = TrialSetup(
        train={**spec.train, "data": str(plan.data)},
        runs_dir=str(plan.experiment_dir / "runs"),
        sweep_name=spec.name,
        tracking_uri=plan.tracking_uri,
        experiment_id=experiment_id,
        parent_run_id=parent_run_id,
        model_builder=spec.model_builder,
        cpus=spec.cpus_per_trial,
        gpus=spec.gpus_per_trial,
    )
    try:
        # trials with Train workers: Ray Train's placement-group watcher warns every second
        # without a dashboard (the private local Ray has none): errors only
        quiet = "ERROR" if spec.max_workers > 1 else None
        with ray_connection(address, num_cpus, num_gpus, log_level=quiet) as where:
            echo(f"trials run on {where}; sweep dir {plan.experiment_dir}")
            check_resources(spec.cpus_per_trial, spec.gpus_per_trial, spec.max_workers)
            results = build_tuner(plan, setup, restore=resume).fit()
        outcomes = trial_outcomes(results)
        outcome.interrupted = any(o.state == "unfinished" for o in outcomes.values())
        summarize(client, outcome, outcomes, setup, plan.spec)
    except KeyboardInterrupt:
        client.set_terminated(parent_run_id, status="KILLED")
        raise
    except BaseException:
        client.set_terminated(parent_run_id, status="FAILED")
        raise
    client.set_terminated(parent_run_id, status=outcome.parent_status)
    return outcome
