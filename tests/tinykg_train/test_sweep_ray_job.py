"""Sweeps submitted with `ray job submit` to a real Ray head on 127.0.0.1 (token auth on, free ports),
the way the README tells users to run them; the `ray_cluster` fixture stops exactly that cluster."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tinykg_train.sweep.mlflow_runs import ERROR_TAG, SWEEP_TAG, TRIAL_TAG, child_runs, client_for

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # a cluster start plus two jobs: about 1.5 minutes on 2 cores


def submit_sweep(cluster, tmp_path: Path, data: Path, *args: str):
    """Submit `python -m pipelines.sweep` from the repository root; returns (job result, sweep state)."""
    command = [
        "python", "-m", "pipelines.sweep", "--data", str(data),
        "--config", "configs/sweep_tiny.yaml", "--model", "bprmf",
        "--out", str(tmp_path / "sweeps"), *args,
    ]  # fmt: skip
    done = cluster.submit(
        command,
        working_dir=REPO,
        env_vars={"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"},
        timeout=300,
    )
    state_path = tmp_path / "sweeps" / "tiny" / "sweep.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else None
    return done, state


@pytest.fixture
def data(tiny_dataset_dir, tmp_path) -> Path:
    return Path(shutil.copytree(tiny_dataset_dir, tmp_path / "data"))


def test_a_submitted_sweep_runs_four_trials_on_the_cluster(ray_cluster, data, tmp_path):
    done, state = submit_sweep(ray_cluster, tmp_path, data, "--bits", "2,32", "--seed", "0,1")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "trials run on Ray cluster at" in done.stdout  # joined the job's cluster, no local Ray
    assert "4 trial(s): 4 finished" in done.stdout
    client = client_for(state["tracking_uri"])
    runs = child_runs(client, state["experiment_id"], state["parent_run_id"])
    assert len(runs) == 4
    assert sorted((r.data.params["bits"], r.data.params["seed"]) for r in runs) == [
        ("2", "0"), ("2", "1"), ("32", "0"), ("32", "1"),
    ]  # fmt: skip
    for run in runs:
        assert run.info.status == "FINISHED"
        assert run.data.tags[SWEEP_TAG] == "tiny"
        assert run.data.tags["mlflow.parentRunId"] == state["parent_run_id"]
        assert {"test_recall_at_20", "test_ndcg_at_20", "activation_bytes"} <= set(run.data.metrics)
        assert len(client.get_metric_history(run.info.run_id, "recall_at_20")) == 2  # per epoch
        run_dir = tmp_path / "sweeps" / "tiny" / "runs" / run.data.tags[TRIAL_TAG]
        assert json.loads((run_dir / "metrics.json").read_text())["bits"] == int(
            run.data.params["bits"]
        )
    by_bits = {r.data.params["bits"]: r.data.metrics["activation_bytes"] for r in runs}
    assert by_bits["2"] < by_bits["32"]  # the compressed trials hold less for backward
    parent = client.get_run(state["parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.data.metrics["n_finished"] == 4
    assert {"summary.csv", "pareto.png"} <= {
        a.path for a in client.list_artifacts(parent.info.run_id)
    }


def test_a_crashing_trial_fails_while_the_others_finish(ray_cluster, data, tmp_path):
    done, state = submit_sweep(
        ray_cluster, tmp_path, data, "--bits", "2", "--seed", "0,1",
        "--model-builder", "tests.sweep_builders:crash_seed_1",
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "2 trial(s): 1 finished, 1 failed" in done.stdout
    client = client_for(state["tracking_uri"])
    runs = {
        r.data.params["seed"]: r
        for r in child_runs(client, state["experiment_id"], state["parent_run_id"])
    }
    assert {seed: r.info.status for seed, r in runs.items()} == {"0": "FINISHED", "1": "FAILED"}
    assert runs["1"].data.tags[ERROR_TAG] == (
        "RuntimeError: simulated crash while building the model (seed 1)"
    )
