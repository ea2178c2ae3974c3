"""Whole sweeps on a private local Ray (no cluster given), run as `python -m pipelines.sweep`.

Trials train the real models on the tiny synthetic dataset for two or three epochs of two batches;
`tests.sweep_builders` makes chosen trials crash, lose their process, or rank badly enough for
ASHA to stop them. Each sweep reads its MLflow runs back from the sqlite store it wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tinykg_train.sweep.mlflow_runs import (
    ERROR_TAG,
    STOPPED_TAG,
    SWEEP_TAG,
    TRIAL_TAG,
    child_runs,
    client_for,
)
from tinykg_train.threads import available_cpus

REPO = Path(__file__).resolve().parents[2]
TINY = ["--config", "configs/sweep_tiny.yaml", "--model", "bprmf", "--bits", "2", "--num-cpus", "2"]


def sweep_command(tmp_path: Path, data: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "pipelines.sweep", "--data", str(data), *TINY,
        "--out", str(tmp_path / "sweeps"), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
        *args,
    ]  # fmt: skip


def clean_env() -> dict[str, str]:
    """No cluster address or tracking URI leaking in from the caller's shell."""
    return {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}


def run_sweep_cli(command: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    """The sweep CLI's run, its output as text. Undecodable bytes are replaced, not raised on: in
    one loaded CI run the driver's stdout held NUL-filled bytes (not traced; likely a killed
    trial's log as Ray forwards it), and the tests read the outcome from MLflow, not from it."""
    return subprocess.run(
        command, cwd=REPO, env=clean_env(), capture_output=True, text=True, errors="replace",
        timeout=timeout,
    )  # fmt: skip


def read_sweep(tmp_path: Path, name: str = "tiny", *, while_running: bool = False):
    """(client, parent run, child runs by seed) of the sweep stored under tmp_path.
    `while_running`: skip child runs that have not logged their params yet (a trial's run exists
    a moment before its params do)."""
    state = json.loads((tmp_path / "sweeps" / name / "sweep.json").read_text())
    client = client_for(state["tracking_uri"])
    children = child_runs(client, state["experiment_id"], state["parent_run_id"])
    if while_running:
        children = [run for run in children if "seed" in run.data.params]
    by_seed = {int(run.data.params["seed"]): run for run in children}
    assert len(by_seed) == len(children), "one MLflow run per trial"
    return client, client.get_run(state["parent_run_id"]), by_seed


@pytest.fixture
def data(tiny_dataset_dir, tmp_path) -> Path:
    """A private copy of the tiny dataset (trials may write caches beside it)."""
    return Path(shutil.copytree(tiny_dataset_dir, tmp_path / "data"))


def test_finished_stopped_and_killed_trials_each_end_right_in_mlflow(data, tmp_path):
    # one at a time, in grid order: seed 0 trains normally and reaches ASHA's first rung first;
    # seed 1 ranks every valid item last there and is stopped; seed 2's process is killed.
    # Each trial reserves both CPUs, so it trains with two torch threads ($OMP_NUM_THREADS is 1).
    done = run_sweep_cli(
        sweep_command(
            tmp_path, data, "--seed", "0,1,2", "--epochs", "3", "--asha", "--max-concurrent", "1",
            "--model-builder", "tests.sweep_builders:valid_items_last_seed_1_kill_seed_2",
            "--cpus-per-trial", "2",
        )
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "3 trial(s): 1 finished, 1 stopped, 1 failed" in done.stdout
    client, parent, runs = read_sweep(tmp_path)
    statuses = {seed: run.info.status for seed, run in runs.items()}
    assert statuses == {0: "FINISHED", 1: "KILLED", 2: "FAILED"}

    finished = runs[0]
    assert finished.data.tags[SWEEP_TAG] == "tiny" and finished.data.params["bits"] == "2"
    assert finished.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert 0 < finished.data.metrics["test_recall_at_20"] <= 1
    assert finished.data.metrics["activation_bytes"] > 0
    assert len(client.get_metric_history(finished.info.run_id, "epoch_seconds")) == 3
    threads = min(2, available_cpus())
    assert finished.data.params["threads"] == str(threads)
    trial_dir = tmp_path / "sweeps" / "tiny" / "runs" / finished.data.tags[TRIAL_TAG]
    assert json.loads((trial_dir / "metrics.json").read_text())["torch_threads"] == threads

    stopped = runs[1]
    assert stopped.data.tags[STOPPED_TAG] == "asha" and ERROR_TAG not in stopped.data.tags
    assert len(client.get_metric_history(stopped.info.run_id, "train_loss")) < 3
    assert "test_recall_at_20" not in stopped.data.metrics

    assert "killed" in runs[2].data.tags[ERROR_TAG]  # died before training created its run

    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["n_failed"] == 1 and parent.data.metrics["n_stopped"] == 1
    logged = {item.path for item in client.list_artifacts(parent.info.run_id)}
    assert {"summary.csv", "summary.txt", "pareto.png", "sweep.json"} <= logged
    table = (tmp_path / "sweeps" / "tiny" / "summary.txt").read_text()
    assert "STOPPED" in table and "failed " in table


@pytest.mark.slow
def test_resume_continues_an_interrupted_sweep_in_the_same_runs(data, tmp_path):
    # one at a time: seed 0 finishes, then seed 1 (2 s per epoch) is interrupted after its first
    # epoch's checkpoint; --resume must continue it from there in the same MLflow run
    command = sweep_command(
        tmp_path, data, "--seed", "0,1", "--epochs", "4", "--max-concurrent", "1",
        "--model-builder", "tests.sweep_builders:slow_seed_1",
    )  # fmt: skip
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",  # as in run_sweep_cli
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.5)
            if (tmp_path / "sweeps" / "tiny" / "sweep.json").exists():
                _, _, runs = read_sweep(tmp_path, while_running=True)
                trial = runs[1].data.tags[TRIAL_TAG] if 1 in runs else None
                if (
                    trial
                    and (tmp_path / "sweeps" / "tiny" / "runs" / trial / "checkpoint.pt").exists()
                ):
                    break
        assert process.poll() is None, "the sweep ended before it could be interrupted"
        process.send_signal(signal.SIGINT)  # Ctrl-C: Tune saves its state and stops
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, output[-3000:]
    assert "interrupted: continue it with the same command plus --resume" in output
    client, parent, before = read_sweep(tmp_path)
    assert parent.info.status == "KILLED"
    assert {s: r.info.status for s, r in before.items()} == {0: "FINISHED", 1: "KILLED"}

    done = run_sweep_cli([*command, "--resume"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 trial(s): 2 finished" in done.stdout
    client, parent, after = read_sweep(tmp_path)
    assert parent.info.status == "FINISHED"
    assert {s: r.info.status for s, r in after.items()} == {0: "FINISHED", 1: "FINISHED"}
    # the same MLflow runs: the finished trial untouched, the interrupted one continued
    assert {s: r.info.run_id for s, r in after.items()} == {
        s: r.info.run_id for s, r in before.items()
    }
    assert after[0].info.end_time == before[0].info.end_time
    assert after[1].data.tags["resumed"] == "true"
    epochs = {m.step for m in client.get_metric_history(after[1].info.run_id, "train_loss")}
    assert epochs == {0, 1, 2, 3}


def test_a_sweep_over_adaptive_widths_and_memory_budgets(data, tmp_path):
    """`bits: auto` and `memory_budget` as axes: each trial trains within its own budget. (KGIN's
    tiny step needs 4.5 MB at 1 bit and 6.9 MB at FP32 with these sizes: 5MB binds.)"""
    command = sweep_command(
        tmp_path, data, "--model", "kgin", "--bits", "auto", "--memory-budget", "5MB,1GB",
        "--seed", "0", "--epochs", "1", "--embed-dim", "64", "--n-layers", "3",
    )  # fmt: skip
    done = run_sweep_cli(command)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 trial(s): 2 finished" in done.stdout
    state = json.loads((tmp_path / "sweeps" / "tiny" / "sweep.json").read_text())
    client = client_for(state["tracking_uri"])
    runs = child_runs(client, state["experiment_id"], state["parent_run_id"])
    budgets = {run.data.params["memory_budget"]: run for run in runs}
    assert set(budgets) == {"5MB", "1GB"}
    for run in budgets.values():
        assert run.data.params["bits"] == "auto"
        assert any(key.startswith("bits_chosen.cf.epoch0.") for key in run.data.params)
    tight, loose = (budgets[b].data.metrics["activation_bytes"] for b in ("5MB", "1GB"))
    assert tight < loose  # the tight budget chose narrower widths
    table = (tmp_path / "sweeps" / "tiny" / "summary.txt").read_text()
    assert "auto" in table and "5MB" in table
