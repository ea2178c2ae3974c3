"""After Tune returns: how each trial ended, the MLflow runs settled, the table, chart and verdict.

Tune's view (finished / stopped / errored / unfinished, per trial) and MLflow's (each trial's run)
are reconciled here: a run left RUNNING by a killed or ASHA-stopped trial is closed, and a trial that
died before training created its run gets a FAILED one, so every trial is one row in the summary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from tinykg_train.config import TrainConfig
from tinykg_train.errors import TinyKGError
from tinykg_train.run_dir import write_text_atomic
from tinykg_train.sweep.mlflow_runs import (
    KILLED_MESSAGE,
    TRIAL_TAG,
    TrialOutcome,
    child_runs,
    error_line,
    settle_children,
)
from tinykg_train.sweep.pareto import pareto_chart
from tinykg_train.sweep.spec import SweepSpec
from tinykg_train.sweep.summary import TrialRow, format_table, mark_pareto, row_from_run, write_csv
from tinykg_train.sweep.trial import TrialSetup, record_failure, trial_id_of


@dataclass
class SweepOutcome:
    """What a sweep produced; `exit_code` is what the CLI returns."""

    experiment_dir: Path
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    rows: list[TrialRow] = field(default_factory=list)
    interrupted: bool = False
    table: str = ""
    artifacts: list[Path] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(row.status == status for row in self.rows)

    @property
    def all_failed(self) -> bool:
        return bool(self.rows) and self.count("FAILED") == len(self.rows)

    @property
    def parent_status(self) -> str:
        """The parent run's final MLflow status: KILLED when interrupted, FAILED when no trial ran
        or every trial failed, else FINISHED."""
        if self.interrupted:
            return "KILLED"
        return "FAILED" if self.all_failed or not self.rows else "FINISHED"

    @property
    def exit_code(self) -> int:
        return {"FINISHED": 0, "FAILED": 1, "KILLED": 130}[self.parent_status]

    def verdict(self) -> str:
        counts = ", ".join(
            f"{self.count(s)} {s.lower()}"
            for s in ("FINISHED", "STOPPED", "FAILED", "KILLED")
            if self.count(s)
        )
        line = f"{len(self.rows)} trial(s): {counts or 'none ran'}"
        if self.interrupted:
            return f"{line}; interrupted: continue it with the same command plus --resume"
        if self.all_failed:
            return f"{line}; every trial failed (errors above)"
        return line


class TrialDied(RuntimeError):
    """A trial whose process ended before its training created an MLflow run."""


def trial_outcomes(results) -> dict[str, TrialOutcome]:
    """{trial id: how Tune saw it end} from a ResultGrid (`done` is set on finished and stopped trials)."""
    outcomes = {}
    for result in results:
        trial_id = trial_id_of(result.path)
        if result.error is not None:
            state, error = "error", error_line(result.error)
        else:
            state, error = ("done" if (result.metrics or {}).get("done") else "unfinished"), ""
        outcomes[trial_id] = TrialOutcome(trial_id, state, error, dict(result.config or {}))
    return outcomes


def record_missing_failures(
    runs: list, outcomes: dict[str, TrialOutcome], setup: TrialSetup
) -> bool:
    """Give every errored trial without a run a FAILED one (with its params and the error); True if any."""
    have = {run.data.tags.get(TRIAL_TAG) for run in runs}
    missing = [o for o in outcomes.values() if o.state == "error" and o.trial_id not in have]
    for trial in missing:
        settings = {**setup.train, **trial.params}
        tracker = setup.tracker(trial.trial_id, settings)
        run_dir = setup.run_dir(trial.trial_id)
        config = TrainConfig.from_dict({**settings, "out": str(run_dir.path)})
        record_failure(tracker, config, run_dir, TrialDied(f"{KILLED_MESSAGE}: {trial.error}"))
    return bool(missing)


def summarize(
    client,
    outcome: SweepOutcome,
    outcomes: dict[str, TrialOutcome],
    setup: TrialSetup,
    spec: SweepSpec,
) -> None:
    """Settle leftover runs, fill `outcome` (rows, table), write and log the artifacts and counts."""
    from mlflow.entities import Metric

    runs = child_runs(client, outcome.experiment_id, outcome.parent_run_id)
    settled = settle_children(client, runs, outcomes, outcome.interrupted)
    if record_missing_failures(runs, outcomes, setup) or settled:
        runs = child_runs(client, outcome.experiment_id, outcome.parent_run_id)
    swept = [axis.name for axis in spec.axes]
    outcome.rows = sorted((row_from_run(client, run, swept) for run in runs), key=lambda r: r.trial)
    if not outcome.rows and not outcome.interrupted:  # interrupted before any trial started: fine
        raise TinyKGError(
            f"no trial of sweep {spec.name!r} reached MLflow at {outcome.tracking_uri}; see the Ray logs above"
        )
    mark_pareto(outcome.rows)
    outcome.table = format_table(outcome.rows)
    directory = outcome.experiment_dir
    artifacts = [
        write_csv(directory / "summary.csv", outcome.rows),
        write_text_atomic(
            directory / "summary.txt", outcome.table + "\n" + outcome.verdict() + "\n"
        ),
        pareto_chart(outcome.rows, directory / "pareto.png", f"{spec.name}: memory vs Recall@20"),
        directory / "sweep.json",
    ]
    outcome.artifacts = [path for path in artifacts if path is not None]
    for path in outcome.artifacts:
        client.log_artifact(outcome.parent_run_id, str(path))
    finished = [row.recall for row in outcome.rows if row.comparable]
    metrics = {
        f"n_{status.lower()}": float(outcome.count(status))
        for status in ("FINISHED", "FAILED", "STOPPED")
    }
    metrics["n_trials"] = float(len(outcome.rows))
    if finished:
        metrics["best_test_recall_at_20"] = max(finished)
    stamp = int(time.time() * 1000)
    client.log_batch(
        outcome.parent_run_id, metrics=[Metric(k, v, stamp, 0) for k, v in metrics.items()]
    )
