"""Pieces of one sweep trial that run without Ray: names, failure records in MLflow."""

from __future__ import annotations

from types import SimpleNamespace

from tinykg_train.config import TrainConfig
from tinykg_train.run_dir import RunDir
from tinykg_train.sweep.mlflow_runs import ERROR_TAG, client_for
from tinykg_train.sweep.trial import (
    TrialNamer,
    record_failure,
    trial_device,
    trial_label,
    trial_threads,
)
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


def test_a_trial_uses_as_many_threads_as_the_cpus_it_was_given(monkeypatch):
    import tinykg_train.threads as threads

    monkeypatch.setattr(threads, "available_cpus", lambda: 4)
    assert trial_threads(None, 2.0) == 2
    assert trial_threads(None, 0.5) == 1  # a fraction of a CPU still runs one thread
    assert trial_threads(None, 16.0) == 4  # never more than this process may use
    assert trial_threads(3, 2.0) == 3  # `threads` set in the sweep wins
    assert trial_threads(None, None) is None  # Ray said nothing: the trainer's auto choice


def test_each_trial_config_sits_on_its_models_defaults():
    """A `model` axis: each trial gets its model's hyperparameters unless the sweep sets them."""
    from tinykg_train.sweep.space import check_settings

    train = {"epochs": 2, "embed_dim": 16}
    kgcn = check_settings({**train, "model": "kgcn"}, "trial")
    lightgcn = check_settings({**train, "model": "lightgcn"}, "trial")
    assert (kgcn.embed_dim, kgcn.n_layers, kgcn.dropout) == (16, 1, 0.0)
    assert (lightgcn.embed_dim, lightgcn.n_layers, lightgcn.l2) == (16, 3, 1e-4)
