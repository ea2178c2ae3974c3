"""The end-of-sweep table read back from runs logged by the real `MlflowTracker` (sqlite store)."""

from __future__ import annotations

import csv

import pytest

from tinykg_train.config import TrainConfig
from tinykg_train.run_dir import RunDir
from tinykg_train.sweep.mlflow_runs import (
    ERROR_TAG,
    STOPPED_TAG,
    TRIAL_TAG,
    child_runs,
    client_for,
    start_parent_run,
)
from tinykg_train.sweep.summary import format_table, mark_pareto, row_from_run, write_csv
from tinykg_train.tracking import MlflowTracker, ensure_experiment


@pytest.fixture(scope="module")
def sweep_runs(tmp_path_factory):
    """A parent with three children: finished (2 epochs), stopped by ASHA, failed."""
    root = tmp_path_factory.mktemp("summary")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = client_for(uri)
    experiment_id = ensure_experiment(client, "summary", uri)
    parent = start_parent_run(client, experiment_id, "s", {})

    def tracker(trial, **settings):
        config = TrainConfig(data="d", out=str(root / trial), **settings)
        tracker = MlflowTracker(
            uri, tags={TRIAL_TAG: trial}, parent_run_id=parent, experiment_id=experiment_id
        )
        tracker.start(config, RunDir(config.out).create(), "cpu")
        return tracker

    done = tracker("t0", model="kgat", bits=2, lr=0.01, seed=0, embed_dim=32)
    for epoch, seconds in enumerate((1.0, 3.0)):
        done.log_epoch(
            epoch, {"epoch_seconds": seconds, "recall@20": 0.2, "activation_bytes": 3 * 2**20}
        )
    done.finish(
        {"recall@20": 0.25, "ndcg@20": 0.125, "activation_bytes": 3 * 2**20,
         "most_popular": {"recall@20": 0.1875, "ndcg@20": 0.0625}},
        RunDir(root / "t0"),
    )  # fmt: skip
    stopped = tracker("t1", model="lightgcn", bits=32, seed=1, embed_dim=64)
    stopped.log_epoch(0, {"epoch_seconds": 2.0, "recall@20": 0.1, "activation_bytes": 40 * 2**20})
    client.set_tag(stopped.run_id, STOPPED_TAG, "asha")
    stopped.fail("KILLED")
    failed = tracker("t2", model="kgat", bits=4, seed=2, embed_dim=32)
    client.set_tag(failed.run_id, ERROR_TAG, "RuntimeError: out of memory")
    failed.fail("FAILED")
    runs = child_runs(client, experiment_id, parent)
    return [row_from_run(client, run, ["embed_dim", "bits"]) for run in runs]


def test_rows_carry_settings_status_and_numbers(sweep_runs):
    done, stopped, failed = sweep_runs
    assert (done.trial, done.status, done.settings) == (
        "t0",
        "FINISHED",
        {"model": "kgat", "bits": "2", "lr": "0.01", "seed": "0", "embed_dim": "32"},
    )
    assert (done.recall, done.ndcg, done.activation_mib, done.epoch_seconds) == (
        0.25,
        0.125,
        3.0,
        2.0,
    )
    assert done.popular == 0.1875 and stopped.popular is None
    assert stopped.status == "STOPPED" and stopped.recall is None and stopped.activation_mib == 40.0
    assert failed.status == "FAILED" and failed.error == "RuntimeError: out of memory"
    assert failed.epoch_seconds is None and not failed.comparable


def test_table_and_csv(sweep_runs, tmp_path):
    mark_pareto(sweep_runs)
    lines = format_table(sweep_runs).splitlines()
    header = lines[0].split()
    assert header[:6] == ["trial", "model", "bits", "lr", "seed", "embed_dim"]
    assert lines[2].split() == [
        "t0",
        "kgat",
        "2",
        "0.01",
        "0",
        "32",
        "FINISHED",
        "0.2500",
        "0.1250",
        "0.1875",
        "3.000",
        "2.00",
        "*",
    ]
    assert lines[3].split()[6:] == ["STOPPED", "40.000", "2.00"]
    assert lines[-1] == "failed t2: RuntimeError: out of memory"
    with open(write_csv(tmp_path / "s.csv", sweep_runs)) as handle:
        rows = list(csv.DictReader(handle))
    assert [r["status"] for r in rows] == ["FINISHED", "STOPPED", "FAILED"]
    assert rows[0]["recall@20"] == "0.2500" and rows[0]["pareto"] == "*"
    assert rows[2]["error"] == "RuntimeError: out of memory" and rows[2]["mlflow_run_id"]
