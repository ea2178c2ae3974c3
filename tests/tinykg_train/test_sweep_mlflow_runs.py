"""The sweep's MLflow runs on a real sqlite store: experiment, parent, children, settling leftovers."""

from __future__ import annotations

from pathlib import Path

from tinykg_train.sweep.mlflow_runs import (
    ERROR_TAG,
    KILLED_MESSAGE,
    ROLE_TAG,
    STOPPED_TAG,
    SWEEP_TAG,
    TRIAL_TAG,
    TrialOutcome,
    child_runs,
    client_for,
    error_line,
    settle_children,
    start_parent_run,
)
from tinykg_train.tracking import ensure_experiment


def new_sweep(mlflow_store: str, experiment: str, params: dict | None = None):
    """A parent run of sweep "s" in `experiment`: (client, experiment id, parent run id)."""
    client = client_for(mlflow_store)
    experiment_id = ensure_experiment(client, experiment, mlflow_store)
    return client, experiment_id, start_parent_run(client, experiment_id, "s", params or {})


def make_child(client, experiment_id, parent_id, trial, status):
    run = client.create_run(
        experiment_id,
        tags={"mlflow.parentRunId": parent_id, SWEEP_TAG: "s", TRIAL_TAG: trial},
    )
    if status != "RUNNING":
        client.set_terminated(run.info.run_id, status=status)
    return run.info.run_id


def test_experiment_is_created_once_with_artifacts_beside_the_database(mlflow_store):
    client = client_for(mlflow_store)
    first = ensure_experiment(client, "exp-a", mlflow_store)
    assert ensure_experiment(client, "exp-a", mlflow_store) == first
    location = client.get_experiment(first).artifact_location
    db_dir = Path(mlflow_store.removeprefix("sqlite:///")).parent
    assert location.endswith(str(db_dir / "mlruns" / "exp-a"))


def test_a_deleted_experiment_is_restored_so_runs_can_be_created_in_it(mlflow_store):
    client = client_for(mlflow_store)
    deleted = ensure_experiment(client, "exp-deleted", mlflow_store)
    client.delete_experiment(deleted)
    assert ensure_experiment(client, "exp-deleted", mlflow_store) == deleted
    assert client.get_experiment(deleted).lifecycle_stage == "active"
    assert client.create_run(deleted).info.experiment_id == deleted


def test_parent_params_and_children_of_that_parent_only(mlflow_store):
    params = {"train": {"epochs": 2}, "num_samples": 1}
    client, experiment_id, parent = new_sweep(mlflow_store, "exp-b", params)
    other = start_parent_run(client, experiment_id, "s2", {})
    parent_run = client.get_run(parent)
    assert parent_run.data.params == {"train.epochs": "2", "num_samples": "1"}
    assert parent_run.data.tags[ROLE_TAG] == "parent" and parent_run.data.tags[SWEEP_TAG] == "s"
    mine = [make_child(client, experiment_id, parent, f"t{i}", "FINISHED") for i in range(3)]
    make_child(client, experiment_id, other, "x", "FINISHED")
    assert [run.info.run_id for run in child_runs(client, experiment_id, parent)] == mine


def test_settle_children_closes_only_running_runs(mlflow_store):
    client, experiment_id, parent = new_sweep(mlflow_store, "exp-c")
    finished = make_child(client, experiment_id, parent, "done", "FINISHED")
    stopped = make_child(client, experiment_id, parent, "asha", "RUNNING")
    lost = make_child(client, experiment_id, parent, "killed", "RUNNING")
    orphan = make_child(client, experiment_id, parent, "unknown", "RUNNING")
    cut_short = make_child(client, experiment_id, parent, "asha-late", "FAILED")
    crashed = make_child(client, experiment_id, parent, "crashed", "FAILED")
    outcomes = {
        "done": TrialOutcome("done", "done"),
        "asha": TrialOutcome("asha", "done"),
        # the trainer marked it FAILED, then the worker was torn down before the trial re-marked it
        "asha-late": TrialOutcome("asha-late", "done"),
        "crashed": TrialOutcome("crashed", "error", "RuntimeError: x"),
        "killed": TrialOutcome("killed", "error", "ActorDiedError: the actor died"),
    }
    runs = child_runs(client, experiment_id, parent)
    settled = settle_children(client, runs, outcomes, interrupted=False)
    assert settled == {stopped: "KILLED", lost: "FAILED", orphan: "FAILED", cut_short: "KILLED"}
    runs = {run.info.run_id: run for run in child_runs(client, experiment_id, parent)}
    assert runs[finished].info.status == "FINISHED"
    assert (
        runs[stopped].data.tags[STOPPED_TAG] == "asha" and ERROR_TAG not in runs[stopped].data.tags
    )
    assert runs[lost].data.tags[ERROR_TAG] == f"{KILLED_MESSAGE}: ActorDiedError: the actor died"
    assert runs[orphan].data.tags[ERROR_TAG] == KILLED_MESSAGE
    assert runs[cut_short].data.tags[STOPPED_TAG] == "asha"
    assert runs[crashed].info.status == "FAILED" and ERROR_TAG not in runs[crashed].data.tags
    # settling twice changes nothing
    assert settle_children(client, list(runs.values()), outcomes, interrupted=False) == {}


def test_an_interrupted_sweep_leaves_its_unfinished_trials_killed_without_error(mlflow_store):
    client, experiment_id, parent = new_sweep(mlflow_store, "exp-d")
    running = make_child(client, experiment_id, parent, "t0", "RUNNING")
    died = make_child(client, experiment_id, parent, "t1", "RUNNING")
    outcomes = {"t0": TrialOutcome("t0", "unfinished"), "t1": TrialOutcome("t1", "error", "E: x")}
    runs = child_runs(client, experiment_id, parent)
    assert settle_children(client, runs, outcomes, interrupted=True) == {
        running: "KILLED",
        died: "FAILED",
    }
    assert ERROR_TAG not in client.get_run(running).data.tags


def test_an_interrupted_trial_its_trainer_marked_failed_is_killed_for_resume(mlflow_store):
    """Ctrl-C can tear a trial's worker down mid-epoch: the trainer sees an error, marks the run
    FAILED and tags it, though Tune still counts the trial unfinished."""
    client, experiment_id, parent = new_sweep(mlflow_store, "exp-e")
    torn_down = make_child(client, experiment_id, parent, "t0", "FAILED")
    client.set_tag(torn_down, ERROR_TAG, "RayActorError: the actor was killed")
    crashed = make_child(client, experiment_id, parent, "t1", "FAILED")
    outcomes = {"t0": TrialOutcome("t0", "unfinished"), "t1": TrialOutcome("t1", "error", "E: x")}
    runs = child_runs(client, experiment_id, parent)
    assert settle_children(client, runs, outcomes, interrupted=True) == {torn_down: "KILLED"}
    assert ERROR_TAG not in client.get_run(torn_down).data.tags
    assert client.get_run(crashed).info.status == "FAILED"  # a real failure stays one
    # without an interruption an unfinished FAILED run is left as the trial closed it
    quiet = make_child(client, experiment_id, parent, "t2", "FAILED")
    runs = [client.get_run(quiet)]
    assert settle_children(client, runs, {"t2": TrialOutcome("t2", "unfinished")}, False) == {}


def test_error_line_is_short_and_single_line():
    assert error_line(RuntimeError("boom\nsecond line")) == "RuntimeError: boom"
    assert error_line(MemoryError()) == "MemoryError"
    assert len(error_line(ValueError("x" * 2000))) == 500
