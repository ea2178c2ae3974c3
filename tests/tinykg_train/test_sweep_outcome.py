"""The end of a sweep: exit status and verdict from the trial rows; a FAILED run for a trial that
died before training created one (real sqlite store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinykg_train.sweep.mlflow_runs import (
    ERROR_TAG,
    SWEEP_TAG,
    TRIAL_TAG,
    TrialOutcome,
    child_runs,
    client_for,
    start_parent_run,
)
from tinykg_train.sweep.outcome import SweepOutcome, record_missing_failures
from tinykg_train.sweep.summary import TrialRow
from tinykg_train.sweep.trial import TrialSetup
from tinykg_train.tracking import ensure_experiment


def outcome_with(*statuses: str, interrupted: bool = False) -> SweepOutcome:
    rows = [TrialRow(f"t{i}", f"r{i}", status, {}) for i, status in enumerate(statuses)]
    return SweepOutcome(Path("x"), "sqlite:///x", "1", "p", rows=rows, interrupted=interrupted)


@pytest.mark.parametrize(
    ("statuses", "interrupted", "code", "parent", "verdict"),
    [
        (("FINISHED", "FAILED"), False, 0, "FINISHED", "2 trial(s): 1 finished, 1 failed"),
        (("STOPPED", "FINISHED"), False, 0, "FINISHED", "2 trial(s): 1 finished, 1 stopped"),
        (("FAILED", "FAILED"), False, 1, "FAILED", "every trial failed"),
        (
            ("FINISHED", "KILLED"),
            True,
            130,
            "KILLED",
            "interrupted: continue it with the same command plus --resume",
        ),
        ((), False, 1, "FAILED", "0 trial(s): none ran"),
    ],
)
def test_exit_status_is_nonzero_only_if_every_trial_failed(
    statuses, interrupted, code, parent, verdict
):
    outcome = outcome_with(*statuses, interrupted=interrupted)
    assert outcome.exit_code == code
    assert outcome.parent_status == parent
    assert verdict in outcome.verdict()


def test_a_trial_that_died_before_its_run_gets_a_failed_one(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = client_for(uri)
    experiment_id = ensure_experiment(client, "outcome", uri)
    parent = start_parent_run(client, experiment_id, "s", {})
    setup = TrialSetup(
        train={"data": str(tmp_path), "model": "lightgcn", "epochs": 2},
        runs_dir=str(tmp_path / "runs"),
        sweep_name="s",
        tracking_uri=uri,
        experiment_id=experiment_id,
        parent_run_id=parent,
    )
    outcomes = {
        "t0": TrialOutcome("t0", "done"),
        "t1": TrialOutcome("t1", "error", "ActorDiedError: the actor died", {"bits": 2, "seed": 3}),
    }
    assert record_missing_failures([], outcomes, setup)
    (run,) = child_runs(client, experiment_id, parent)
    assert run.info.status == "FAILED"
    assert (run.data.tags[TRIAL_TAG], run.data.tags[SWEEP_TAG]) == ("t1", "s")
    assert run.data.tags[ERROR_TAG].startswith(
        "TrialDied: the trial's process ended without a result"
    )
    assert (run.data.params["model"], run.data.params["bits"], run.data.params["seed"]) == (
        "lightgcn",
        "2",
        "3",
    )
    assert not record_missing_failures([run], outcomes, setup)  # recorded once
