"""Pieces of one sweep trial that run without Ray: names, failure records in MLflow."""

from __future__ import annotations

from types import SimpleNamespace

from tinykg_train.config import TrainConfig
from tinykg_train.run_dir import RunDir
from tinykg_train.sweep.mlflow_runs import ERROR_TAG, client_for
from tinykg_train.sweep.trial import TrialNamer, record_failure, trial_device, trial_label
from tinykg_train.tracking import MlflowTracker, ensure_experiment


def test_labels_name_model_bits_lr_seed():
    assert (
        trial_label({"model": "kgat", "bits": "2", "lr": 1e-3, "seed": 4})
        == "kgat-int2-lr0.001-seed4"
    )
    namer = TrialNamer({"model": "lightgcn", "lr": 0.01})
    trial = SimpleNamespace(config={"bits": 32, "seed": 0}, trial_id="abc_00001")
    assert namer(trial) == namer.name(trial) == "lightgcn-fp32-lr0.01-seed0-abc_00001"


def test_a_trial_failing_before_training_still_gets_a_failed_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = client_for(uri)
    experiment_id = ensure_experiment(client, "trial", uri)
    tracker = MlflowTracker(uri, experiment_id=experiment_id, run_name="t")
    config = TrainConfig(data=str(tmp_path / "missing"), out=str(tmp_path / "run"))
    record_failure(tracker, config, RunDir(config.out), FileNotFoundError("no dataset\nmore"))
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags[ERROR_TAG] == "FileNotFoundError: no dataset"
    assert run.data.params["model"] == "kgat"


def test_recording_never_replaces_the_training_error(tmp_path, capsys):
    store = tmp_path / "not-a-dir" / "mlflow.db"
    (tmp_path / "not-a-dir").write_text("a file where the store's folder should be")
    tracker = MlflowTracker(f"sqlite:///{store}", run_name="t")
    config = TrainConfig(data="d", out=str(tmp_path / "run"))
    record_failure(tracker, config, RunDir(config.out), RuntimeError("the real error"))
    assert "could not record the failure in MLflow" in capsys.readouterr().err


def test_auto_device_follows_the_gpu_reservation():
    assert trial_device("auto", []) == "cpu"  # Ray would not hide the node's GPUs from this trial
    assert trial_device("auto", ["0"]) == "auto"  # Ray made the reserved GPU the only one visible
    assert trial_device("cpu", ["0"]) == "cpu"
