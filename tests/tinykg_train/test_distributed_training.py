"""Data-parallel training on real Ray Train workers: `python -m pipelines.train --workers 2` against
the module's private Ray head on 127.0.0.1 (token auth on, tests/ray_cluster.py), the way a user
runs it. Same model as one worker, one MLflow run with every rank's timings, bad input refused
before anything starts, a 2-worker sweep trial; slow: a worker SIGKILLed mid-epoch, ray job submit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import torch

from tinykg_train.checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parents[2]

# LightGCN without dropout draws nothing at random in a step: N workers and one agree to float order
EXACT = [
    "--model", "lightgcn", "--bits", "32", "--dropout", "0", "--embed-dim", "8", "--layers", "2",
    "--epochs", "3", "--batch-size", "256", "--max-batches-per-epoch", "5", "--seed", "0",
    "--eval-batch-users", "256",
]  # fmt: skip
# KGAT at 2 bits with dropout: stochastic rounding, dropout masks and KG samples on every rank
NOISY = [
    "--model", "kgat", "--bits", "2", "--dropout", "0.1", "--embed-dim", "8", "--layers", "1",
    "--epochs", "3", "--batch-size", "256", "--kg-batch-size", "512", "--max-batches-per-epoch", "4",
    "--seed", "0", "--eval-batch-users", "256",
]  # fmt: skip


def train_cli(args: list[str], env: dict[str, str], timeout: float = 300):
    return subprocess.run(
        [sys.executable, "-m", "pipelines.train", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def explain(done: subprocess.CompletedProcess) -> str:
    return (done.stdout + done.stderr)[-4000:]


def mlflow_runs(uri: str, experiment: str = "tinykg"):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    return client, client.search_runs([found.experiment_id]) if found else []


@pytest.fixture(scope="module")
def two_workers(ray_cluster, tiny_dataset_dir, tmp_path_factory):
    """One 2-worker run of EXACT on the cluster: (finished CLI, run dir, MLflow URI)."""
    root = tmp_path_factory.mktemp("two_workers")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    out = root / "run"
    done = train_cli(
        [*EXACT, "--data", str(tiny_dataset_dir), "--out", str(out), "--workers", "2",
         "--address", ray_cluster.gcs_address, "--tracking-uri", uri],
        ray_cluster.env(),
    )  # fmt: skip
    return done, out, uri


def test_two_workers_train_the_same_model_as_one_worker(two_workers, tiny_dataset_dir, tmp_path):
    from pipelines.train import build_parser, load_config
    from tinykg_train.config import TrainConfig
    from tinykg_train.trainer import train

    done, out, _ = two_workers
    assert done.returncode == 0, explain(done)
    assert "training lightgcn on 2 Ray Train workers (Ray cluster at 127.0.0.1:" in done.stdout
    config = load_config(build_parser().parse_args([*EXACT, "--data", str(tiny_dataset_dir)]))
    assert isinstance(config, TrainConfig) and config.workers == 1
    one = train(config.with_overrides(out=str(tmp_path / "one")))
    two = json.loads((out / "metrics.json").read_text())
    assert two["workers"] == 2 and one["workers"] == 1
    torch.testing.assert_close(two["train_loss"], one["train_loss"], rtol=1e-6, atol=0)
    for got, expected in zip(two["valid_history"], one["valid_history"], strict=True):
        assert got == pytest.approx(expected, abs=1e-9)
    assert two["recall@20"] == pytest.approx(one["recall@20"], abs=1e-9)
    assert two["most_popular"] == one["most_popular"]  # rank 0 ranks it, on the same users
    weights_two = load_checkpoint(out / "checkpoint.pt")["model"]
    weights_one = load_checkpoint(tmp_path / "one" / "checkpoint.pt")["model"]
    assert weights_two.keys() == weights_one.keys()
    for name, tensor in weights_one.items():
        torch.testing.assert_close(weights_two[name], tensor, rtol=1e-5, atol=1e-6)


def test_a_data_parallel_run_is_one_mlflow_run_with_every_ranks_timings(two_workers):
    done, out, uri = two_workers
    assert done.returncode == 0, explain(done)
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["epoch_seconds"]) == len(metrics["epoch_seconds_rank1"]) == 3
    pairs = zip(metrics["allreduce_seconds"], metrics["epoch_seconds"], strict=True)
    assert all(0 < allreduce < epoch for allreduce, epoch in pairs)
    assert metrics["config"]["workers"] == 2
    workers = json.loads((out / "workers.json").read_text())
    assert [w["rank"] for w in workers] == [0, 1] and workers[0]["pid"] != workers[1]["pid"]
    ray_checkpoints = list((out / "ray_train").glob("checkpoint_*/checkpoint.pt"))
    assert len(ray_checkpoints) == 1  # Ray Train's copy of the last epoch (num_to_keep=1)
    assert load_checkpoint(ray_checkpoints[0])["state"]["next_epoch"] == 3
    assert len(load_checkpoint(out / "checkpoint.pt")["worker_rng"]) == 2
    client, runs = mlflow_runs(uri)
    assert len(runs) == 1
    [run] = runs
    assert run.info.status == "FINISHED" and run.data.params["workers"] == "2"
    assert f"run {run.info.run_id}" in done.stdout
    for key in ("epoch_seconds", "epoch_seconds_rank1", "allreduce_seconds", "train_loss",
                "recall_at_20"):  # fmt: skip
        assert len(client.get_metric_history(run.info.run_id, key)) == 3, key
    assert run.data.metrics["test_recall_at_20"] == pytest.approx(metrics["recall@20"])


def free_port() -> int:
    from tests.ray_cluster import free_ports

    return free_ports(1)[0]


BAD_INPUTS = {
    "more workers than the cluster's CPUs": (
        lambda c: ["--workers", "3", "--address", c.gcs_address],
        lambda c: c.env(),
        "--workers 3 needs 3 CPUs (one per worker) but the Ray cluster at 127.0.0.1:",
    ),
    "more workers than this machine's CPUs": (
        lambda c: ["--workers", str(len(os.sched_getaffinity(0)) + 1)],
        lambda c: {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        "CPUs (one per worker) but this machine has",
    ),
    "more workers than GPUs": (
        lambda c: ["--workers", str(max(2, torch.cuda.device_count() + 1)), "--device", "cuda"],
        lambda c: {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        "GPUs (one per worker) but this machine has",
    ),
    "an unreachable address": (
        lambda c: ["--workers", "2", "--address", f"127.0.0.1:{free_port()}"],
        lambda c: c.env(),
        "no Ray cluster answers at 127.0.0.1:",
    ),
    "a token-auth cluster without a token": (
        lambda c: ["--workers", "2", "--address", c.gcs_address],
        lambda c: {k: v for k, v in c.env().items() if k != "RAY_AUTH_MODE"},
        "requires token authentication and this client sent no token: export RAY_AUTH_MODE=token",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_is_one_line_and_leaves_nothing_behind(
    case, ray_cluster, tiny_dataset_dir, tmp_path
):
    args, env, message = BAD_INPUTS[case]
    workers = int(args(ray_cluster)[1])
    if case == "more workers than GPUs" and workers > len(os.sched_getaffinity(0)):
        pytest.skip("this machine has fewer CPUs than the GPU check needs workers")
    own_tmp = Path(tempfile.mkdtemp(prefix="tkbad-", dir="/tmp"))  # where a local Ray would live
    out, db = tmp_path / "run", tmp_path / "mlflow.db"
    try:
        done = train_cli(
            [*EXACT, "--data", str(tiny_dataset_dir), "--out", str(out), *args(ray_cluster),
             "--tracking-uri", f"sqlite:///{db}"],
            {**env(ray_cluster), "TMPDIR": str(own_tmp)},
            timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, explain(done)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
        assert message in done.stderr
        assert not out.exists() and not db.exists()
        assert not list(own_tmp.iterdir())
        assert not [
            p
            for p in psutil.process_iter(["cmdline"])
            if str(own_tmp) in " ".join(p.info["cmdline"] or ())
        ]
    finally:
        own_tmp.rmdir()


def test_a_sweep_trial_trains_on_two_ray_train_workers(ray_cluster, tiny_dataset_dir, tmp_path):
    """Tune + Train: the one trial drives its own 2-worker Train run on the same cluster."""
    from tinykg_train.sweep.mlflow_runs import TRIAL_TAG, child_runs, client_for

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.sweep", "--data", str(tiny_dataset_dir),
         "--config", "configs/sweep_tiny.yaml", "--model", "lightgcn", "--seed", "0",
         "--set", "workers=2", "--out", str(tmp_path / "sweeps"), "--tracking-uri", uri,
         "--address", ray_cluster.gcs_address],
        env=ray_cluster.env(), cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, explain(done)
    assert "1 trial(s): 1 finished" in done.stdout
    state = json.loads((tmp_path / "sweeps" / "tiny" / "sweep.json").read_text())
    client = client_for(uri)
    [run] = child_runs(client, state["experiment_id"], state["parent_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["workers"] == "2"
    assert len(client.get_metric_history(run.info.run_id, "epoch_seconds_rank1")) == 2
    assert "test_recall_at_20" in run.data.metrics
    run_dir = tmp_path / "sweeps" / "tiny" / "runs" / run.data.tags[TRIAL_TAG]
    assert json.loads((run_dir / "metrics.json").read_text())["workers"] == 2
    assert len(json.loads((run_dir / "workers.json").read_text())) == 2
    progress = next((tmp_path / "sweeps" / "tiny").glob("lightgcn-*/progress.csv")).read_text()
    assert (
        progress.count("\n") == 3
    )  # header, epoch 1 from rank 0 via Train, final with test metrics


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def finished_epochs(run_dir: Path) -> int:
    try:
        return load_checkpoint(run_dir / "checkpoint.pt")["state"]["next_epoch"]
    except Exception:  # not written yet
        return 0


@pytest.mark.slow  # two 2-worker runs, one restarted: about 2 minutes on 2 cores
def test_a_worker_killed_mid_epoch_resumes_and_ends_like_an_uninterrupted_run(
    ray_cluster, tiny_dataset_dir, tmp_path
):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = [*NOISY, "--data", str(tiny_dataset_dir), "--workers", "2",
              "--address", ray_cluster.gcs_address, "--tracking-uri", uri]  # fmt: skip
    reference = train_cli([*common, "--out", str(tmp_path / "reference"), "--no-mlflow"],
                          ray_cluster.env())  # fmt: skip
    assert reference.returncode == 0, explain(reference)

    run_dir = tmp_path / "killed"
    driver = subprocess.Popen(
        [sys.executable, "-m", "pipelines.train", *common, "--out", str(run_dir),
         "--model-builder", "tests.sweep_builders:slow_steps"],  # 0.3 s a step: 2.4 s an epoch
        env=ray_cluster.env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: finished_epochs(run_dir) >= 1, 240, "the first epoch's checkpoint")
        time.sleep(0.6)  # two or so steps into epoch 2 of 3
        workers = json.loads((run_dir / "workers.json").read_text())
        assert finished_epochs(run_dir) == 1
        os.kill(workers[1]["pid"], signal.SIGKILL)
        output, _ = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, output[-4000:]
    assert "resumed at epoch 1" in output
    restarted = json.loads((run_dir / "workers.json").read_text())
    assert workers[1]["pid"] not in {w["pid"] for w in restarted}

    expected = json.loads((tmp_path / "reference" / "metrics.json").read_text())
    got = json.loads((run_dir / "metrics.json").read_text())
    assert got["resumed_at_epoch"] == 1 and expected["resumed_at_epoch"] is None
    for key in ("recall@20", "ndcg@20", "train_loss", "kg_loss", "valid_history", "best_epoch"):
        assert got[key] == expected[key], key
    weights = load_checkpoint(run_dir / "checkpoint.pt")["model"]
    for name, tensor in load_checkpoint(tmp_path / "reference" / "checkpoint.pt")["model"].items():
        assert torch.equal(weights[name], tensor), name
    _, runs = mlflow_runs(uri)
    assert [(r.info.status, r.data.tags.get("resumed")) for r in runs] == [("FINISHED", "true")]


@pytest.mark.slow  # a job submission and a 2-worker run: about a minute on 2 cores
def test_a_submitted_job_trains_on_two_workers_of_the_cluster(
    ray_cluster, tiny_dataset_dir, tmp_path
):
    out = tmp_path / "run"
    done = ray_cluster.submit(
        ["python", "-m", "pipelines.train", *EXACT, "--data", str(tiny_dataset_dir),
         "--out", str(out), "--workers", "2"],
        working_dir=REPO,
        env_vars={"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    )  # fmt: skip
    assert done.returncode == 0, explain(done)
    assert "on 2 Ray Train workers (Ray cluster at" in done.stdout  # joined the job's cluster
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["workers"] == 2 and len(metrics["epoch_seconds_rank1"]) == 3
    _, runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [r.info.status for r in runs] == ["FINISHED"]
