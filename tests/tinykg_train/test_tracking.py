"""MlflowTracker against a real MLflow sqlite store (one per module: creating one takes seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tinykg_train.config import TrainConfig
from tinykg_train.errors import TinyKGError
from tinykg_train.run_dir import RunDir, write_json_atomic, write_yaml_atomic
from tinykg_train.tracking import (
    MlflowTracker,
    absolute_uri,
    default_tracking_uri,
    flatten_params,
    metric_key,
    numeric_metrics,
)
from tinykg_train.trainer import train


def finished_run_dir(path: Path, config: TrainConfig) -> RunDir:
    run = RunDir(path).create()
    write_yaml_atomic(run.config, config.to_dict())
    write_json_atomic(run.metrics, {"recall@20": 0.3})
    run.activation_table.write_text("module,bytes,share\ntotal,10,1.0000\n")
    return run


def test_names_and_values():
    assert metric_key("recall@20") == "recall_at_20"
    assert flatten_params({"a": 1, "ks": (20, 50), "extra": {"alpha": 0.5}}) == {
        "a": "1",
        "ks": "[20, 50]",
        "extra.alpha": "0.5",
    }
    assert numeric_metrics({"ndcg@20": 0.25, "ok": True, "none": None, "n": 3}) == {
        "ndcg_at_20": 0.25,
        "n": 3.0,
    }


def test_tracking_uri_defaults_to_an_absolute_sqlite_file_in_the_cwd(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert absolute_uri("sqlite:///x/m.db") == f"sqlite:///{tmp_path.resolve() / 'x' / 'm.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////elsewhere/m.db")
    assert MlflowTracker().tracking_uri == "sqlite:////elsewhere/m.db"


def test_a_run_logs_params_epochs_artifacts_tags_and_finishes(mlflow_store, tmp_path):
    config = TrainConfig(data="d", out=str(tmp_path / "run"), model="lightgcn", bits=2, seed=7,
                         eval_ks=(20, 50), extra={"alpha": 0.5})  # fmt: skip
    run_dir = finished_run_dir(tmp_path / "run", config)
    tracker = MlflowTracker(mlflow_store, experiment="unit", tags={"purpose": "test"})
    tracker.start(config, run_dir, "cpu")
    for epoch, recall in enumerate([0.1, 0.2]):
        tracker.log_epoch(epoch, {"epoch": epoch, "train_loss": 1 - recall, "recall@20": recall})
    tracker.finish({"recall@20": 0.3, "ndcg@20": 0.2, "activation_bytes": 1234}, run_dir)

    client = MlflowClient(mlflow_store)
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["bits"] == "2" and run.data.params["extra.alpha"] == "0.5"
    assert run.data.params["eval_ks"] == "[20, 50]"
    history = client.get_metric_history(tracker.run_id, "recall_at_20")
    assert [(m.step, m.value) for m in history] == [(0, 0.1), (1, 0.2)]
    assert run.data.metrics["test_recall_at_20"] == 0.3
    assert run.data.metrics["activation_bytes"] == 1234
    tags = run.data.tags
    assert (tags["model"], tags["bits"], tags["device"], tags["purpose"]) == (
        "lightgcn",
        "2",
        "cpu",
        "test",
    )
    assert len(tags["git_commit"]) == 40 and tags["version.torch"] != "not installed"
    artifacts = {a.path for a in client.list_artifacts(tracker.run_id)}
    assert artifacts == {"config.yaml", "metrics.json", "activation_memory.csv"}
    recorded = json.loads(run_dir.mlflow_run.read_text())
    assert recorded == {"tracking_uri": mlflow_store, "run_id": tracker.run_id,
                        "experiment_id": run.info.experiment_id}  # fmt: skip


def test_resume_reopens_the_same_run(mlflow_store, tmp_path):
    config = TrainConfig(data="d", out=str(tmp_path / "run"))
    run_dir = finished_run_dir(tmp_path / "run", config)
    first = MlflowTracker(mlflow_store, experiment="unit")
    first.start(config, run_dir, "cpu")
    first.log_epoch(0, {"train_loss": 0.5})
    first.fail("KILLED")
    again = MlflowTracker(mlflow_store, experiment="unit")
    again.start(config.with_overrides(resume=True), run_dir, "cpu")
    again.log_epoch(1, {"train_loss": 0.4})
    again.finish({"recall@20": 0.1}, run_dir)
    assert again.run_id == first.run_id
    client = MlflowClient(mlflow_store)
    run = client.get_run(again.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["resumed"] == "true"
    assert [m.step for m in client.get_metric_history(again.run_id, "train_loss")] == [0, 1]


def test_fail_marks_the_run_failed(mlflow_store, tmp_path):
    config = TrainConfig(data="d", out=str(tmp_path / "run"))
    tracker = MlflowTracker(mlflow_store, experiment="unit")
    tracker.start(config, RunDir(tmp_path / "run").create(), "cpu")
    tracker.fail()
    assert MlflowClient(mlflow_store).get_run(tracker.run_id).info.status == "FAILED"
    MlflowTracker(mlflow_store).fail()  # never started: nothing to mark, no error


def test_an_unusable_store_is_one_clear_line(tmp_path):
    (tmp_path / "blocker").write_text("a file where a directory is needed")
    tracker = MlflowTracker(f"sqlite:///{tmp_path / 'blocker' / 'mlflow.db'}")
    with pytest.raises(TinyKGError, match="MLflow store sqlite:///.*--no-mlflow"):
        tracker.start(TrainConfig(data="d"), RunDir(tmp_path / "run").create(), "cpu")


def test_a_file_that_is_no_database_is_one_clear_line(tmp_path):
    (tmp_path / "notes.db").write_text("not sqlite")
    tracker = MlflowTracker(f"sqlite:///{tmp_path / 'notes.db'}")
    with pytest.raises(TinyKGError, match="MLflow store sqlite:///.*notes.db: .*--no-mlflow"):
        tracker.start(TrainConfig(data="d"), RunDir(tmp_path / "run").create(), "cpu")


class Crash(RuntimeError):
    pass


def crashing_builder(error: type[BaseException]):
    """The real bprmf model, with a loss that raises `error` in epoch 1."""
    from tinykg_train.models import build_model

    def build(name, dataset, config):
        model = build_model(name, dataset, config)
        healthy = model.loss

        def loss(*batch):
            if model.epochs_started[-1] == 1:
                raise error("boom in epoch 1")
            return healthy(*batch)

        def on_epoch_start(epoch):
            model.epochs_started.append(epoch)

        model.epochs_started = []
        model.loss, model.on_epoch_start = loss, on_epoch_start
        return model

    return build


@pytest.mark.parametrize(("error", "status"), [(Crash, "FAILED"), (KeyboardInterrupt, "KILLED")])
def test_a_training_that_raises_marks_its_run_and_reraises(
    mlflow_store, tiny_dataset_dir, tmp_path, error, status
):
    config = TrainConfig(data=str(tiny_dataset_dir), out=str(tmp_path / "run"), model="bprmf",
                         epochs=3, embed_dim=8, max_batches_per_epoch=2, device="cpu")  # fmt: skip
    tracker = MlflowTracker(mlflow_store, experiment="unit")
    with pytest.raises(error, match="boom in epoch 1"):
        train(config, tracker=tracker, model_builder=crashing_builder(error))
    client = MlflowClient(mlflow_store)
    assert client.get_run(tracker.run_id).info.status == status
    assert [m.step for m in client.get_metric_history(tracker.run_id, "train_loss")] == [0]
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_real_training_tags_its_run_with_what_ran(mlflow_store, tiny_dataset_dir, tmp_path):
    import torch

    import tinykg_kernels
    from tinykg_kernels import backend_usage

    config = TrainConfig(data=str(tiny_dataset_dir), out=str(tmp_path / "run"), model="lightgcn",
                         bits=2, epochs=1, embed_dim=8, max_batches_per_epoch=2, device="cpu")  # fmt: skip
    tracker = MlflowTracker(mlflow_store, experiment="unit")
    before = backend_usage()
    result = train(config, tracker=tracker)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["kernels_backends"] == backend_usage(since=before) != {}
    tags = MlflowClient(mlflow_store).get_run(tracker.run_id).data.tags
    assert json.loads(tags["kernels_backends"]) == result["kernels_backends"]
    used = sorted({b for per_op in result["kernels_backends"].values() for b in per_op})
    assert tags["kernels_backends_used"] == ",".join(used)
    assert tags["tinykg_kernels_version"] == tinykg_kernels.__version__
    assert tags["torch_threads"] == str(torch.get_num_threads()) == str(metrics["torch_threads"])
    assert tags["kernels_native"] == metrics["kernels_native"]
    assert tags["kernels_backend_requested"] == "auto"
