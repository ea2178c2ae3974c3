"""python -m pipelines.train: bad input exits 2 with one line and writes nothing; a run killed with
SIGKILL and resumed ends with exactly the metrics of an uninterrupted run; MLflow logging."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipelines._cli import run_cli
from pipelines.train import build_parser, load_config, main, result_table

REPO_ROOT = Path(__file__).resolve().parents[2]
QUICK = ["--model", "bprmf", "--epochs", "2", "--embed-dim", "8", "--batch-size", "256",
         "--max-batches-per-epoch", "2", "--device", "cpu", "--no-mlflow"]  # fmt: skip


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = run_cli(main, argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def snapshot(root: Path) -> dict[str, int]:
    """Every file under `root` with its modification time."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tiny_dataset_dir, tmp_path_factory) -> Path:
    """A finished quick bprmf run (its checkpoint makes --out taken)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert run_cli(main, ["--data", str(tiny_dataset_dir), "--out", str(out), *QUICK]) == 0
    return out


def bad_cases(data: Path, tmp: Path, finished: Path) -> list[tuple[str, list[str], str]]:
    (tmp / "bad.yaml").write_text("model: kgat\nbits: [2\nepochs: 3\n")
    (tmp / "unknown.yaml").write_text("model: kgat\nlearning_rate: 0.1\n")
    (tmp / "not_a_dataset").mkdir()
    new = ["--out", str(tmp / "new")]
    return [
        ("missing-dataset", ["--data", str(tmp / "nope"), *new], "no such dataset dir"),
        ("not-ingested", ["--data", str(tmp / "not_a_dataset"), *new], "not a dataset dir (no metadata.json)"),
        ("no-dataset", new, "no dataset given: pass --data DIR"),
        ("unknown-model", ["--data", str(data), "--model", "gcn", *new], "unknown model 'gcn': choose one of kgat, kgin"),
        ("bits", ["--data", str(data), "--bits", "3", *new], "'bits' must be one of 1, 2, 4, 8, 32 or auto (got 3)"),
        ("budget-malformed", ["--data", str(data), "--bits", "auto", "--memory-budget", "lots", *new], "'memory_budget' needs a positive size like 300MB, 1.5GiB or 2GB (got 'lots')"),
        ("budget-fixed-bits", ["--data", str(data), "--bits", "2", "--memory-budget", "300MB", *new], "'memory_budget' chooses the widths itself: use it with bits auto (got bits 2)"),
        ("budget-too-small", ["--data", str(data), "--model", "kgat", "--bits", "auto", "--memory-budget", "1kB", "--embed-dim", "8", "--layers", "1", *new], "is below what one training step needs even at 1 bit"),
        ("bits-not-a-number", ["--data", str(data), "--bits", "two", *new], "'bits' needs an integer (got 'two')"),
        ("malformed-yaml", ["--data", str(data), "--config", str(tmp / "bad.yaml"), *new], "bad.yaml:3: not valid YAML"),
        ("unknown-key", ["--data", str(data), "--config", str(tmp / "unknown.yaml"), *new], "unknown.yaml: unknown setting(s) learning_rate"),
        ("missing-config", ["--data", str(data), "--config", str(tmp / "nope.yaml"), *new], "nope.yaml: config file not found"),
        ("bad-set", ["--data", str(data), "--set", "alpha", *new], "--set needs KEY=VALUE (got 'alpha')"),
        ("out-taken", ["--data", str(data), "--out", str(finished)], "already holds a checkpoint of an earlier run: pass --resume"),
        ("resume-changed", ["--data", str(data), "--out", str(finished), "--resume", "--lr", "0.5"], "cannot resume with changed settings (lr: 0.001 -> 0.5)"),
        ("cuda-without-gpu", ["--data", str(data), "--device", "tpu", *new], "'device' must be one of auto, cpu, cuda"),
        ("knob-wrong-type", ["--data", str(data), "--model", "kgin", "--set", "independence_weight=heavy", *new], "'independence_weight' (in extra) needs a number >= 0 (got 'heavy')"),
        ("knob-out-of-range", ["--data", str(data), "--set", "edge_dropout=1", *new], "'edge_dropout' (in extra) needs a number in [0, 1) (got 1)"),
        ("knob-unknown", ["--data", str(data), "--set", "alpha=1", *new], "unknown model setting(s) alpha in 'extra'"),
        ("threads", ["--data", str(data), "--threads", "0", *new], "'threads' needs to be a positive integer or null (got 0)"),
        ("workers-zero", ["--data", str(data), "--workers", "0", *new], "'workers' needs to be a positive integer (got 0)"),
        ("address-one-worker", ["--data", str(data), "--address", "127.0.0.1:1", *new], "--address runs data-parallel workers on a cluster: add --workers N"),
        ("model-builder", ["--data", str(data), "--model-builder", "nowhere:build", *new], "cannot import nowhere"),
        # data parallel: the same checks, before any Ray starts
        ("workers-model-builder", ["--data", str(data), "--workers", "2", "--model-builder", "nowhere:build", *new], "cannot import nowhere"),
        ("workers-out-taken", ["--data", str(data), "--out", str(finished), "--workers", "2"], "already holds a checkpoint of an earlier run: pass --resume"),
        ("workers-resume-changed", ["--data", str(data), "--out", str(finished), "--resume", "--workers", "2"], "cannot resume with changed settings (workers: 1 -> 2)"),
        ("workers-bits-auto", ["--data", str(data), "--workers", "2", "--bits", "auto", *new], "bits auto measures sensitivities in one process"),
        ("workers-no-dataset", ["--workers", "2", *new], "no dataset given: pass --data DIR"),
        ("sampler-without-graph", ["--data", str(data), "--model", "bprmf", "--sampler", "neighbor", *new], "BPRMF has no graph to sample: train it with --sampler none"),
        ("fanouts-per-layer", ["--data", str(data), "--sampler", "neighbor", "--fanouts", "10,10", *new], "'fanouts' needs one count per layer: 3 for n_layers=3"),
        ("fanouts-alone", ["--data", str(data), "--fanouts", "5,5,5", *new], "'fanouts' applies to sampled training only: add --sampler neighbor"),
        ("kgcn-all-neighbors", ["--data", str(data), "--model", "kgcn", "--sampler", "neighbor", "--fanouts=-1", *new], "KGCN draws a fixed number of neighbors per node"),
        ("sampler-workers", ["--data", str(data), "--sampler", "neighbor", "--workers", "2", *new], "--sampler neighbor runs in one process at fixed widths for now: drop --workers"),
        ("sampler-auto", ["--data", str(data), "--sampler", "neighbor", "--bits", "auto", *new], "--sampler neighbor runs in one process at fixed widths for now: drop --bits auto"),
        ("partitions-zero", ["--data", str(data), "--partitions", "0", *new], "'partitions' needs to be a positive integer (1 = whole graph) (got 0)"),
        ("partitions-bprmf", ["--data", str(data), "--model", "bprmf", "--partitions", "2", *new], "BPR-MF has no graph to partition: drop --partitions"),
        ("partitions-workers", ["--data", str(data), "--partitions", "2", "--workers", "2", *new], "--partitions 2 runs in one process at fixed widths for now: drop --workers"),
        ("partitions-auto", ["--data", str(data), "--partitions", "2", "--bits", "auto", *new], "--partitions 2 runs in one process at fixed widths for now: drop --bits auto"),
        ("partitions-kgcn", ["--data", str(data), "--model", "kgcn", "--partitions", "2", *new], "KGCN draws a fixed number of neighbors per node: with --partitions add --sampler neighbor"),
        ("partitions-too-many", ["--data", str(data), "--partitions", "100000", *new], "--partitions 100000 exceeds the"),
        ("offload-whole-graph", ["--data", str(data), "--offload-embeddings", *new], "--offload-embeddings trains through the sampled local path: add --sampler neighbor (or --partitions N)"),
        ("offload-workers", ["--data", str(data), "--sampler", "neighbor", "--offload-embeddings", "--workers", "2", *new], "--offload-embeddings updates the tables in one process: drop --workers"),
        ("offload-auto", ["--data", str(data), "--sampler", "neighbor", "--offload-embeddings", "--bits", "auto", *new], "--offload-embeddings runs at fixed widths"),
        ("offload-bprmf", ["--data", str(data), "--model", "bprmf", "--sampler", "neighbor", "--offload-embeddings", *new], "BPRMF has no graph to sample: train it with --sampler none"),
        ("exact-phases-unknown", ["--data", str(data), "--bits", "2", "--exact-phases", "cf,ranking", *new], "'exact_phases' names training phases: cf, kg (got ranking)"),
        ("exact-phases-fp32", ["--data", str(data), "--bits", "32", "--exact-phases", "kg", *new], "with bits 32 every save is exact already"),
        ("exact-phases-auto", ["--data", str(data), "--bits", "auto", "--exact-phases", "cf", *new], "'exact_phases' applies to fixed widths"),
        ("exact-phases-no-kg", ["--data", str(data), "--model", "lightgcn", "--bits", "2", "--exact-phases", "kg", *new], "--exact-phases kg: lightgcn has no KG phase (only cf)"),
        ("cache-rows-alone", ["--data", str(data), "--sampler", "neighbor", "--cache-rows", "100", *new], "'cache_rows' sizes the device cache of offloaded tables: add --offload-embeddings"),
    ]  # fmt: skip


def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    tiny_dataset_dir, finished_run, tmp_path, capsys
):
    store = tmp_path / "store" / "mlflow.db"
    for name, argv, message in bad_cases(tiny_dataset_dir, tmp_path, finished_run):
        before_tmp, before_run = snapshot(tmp_path), snapshot(finished_run)
        code, out, err = run([*argv, "--tracking-uri", f"sqlite:///{store}"], capsys)
        assert code == 2, name
        assert err.count("\n") == 1 and err.startswith("error: ") and message in err, (name, err)
        assert out == "", name
        assert snapshot(tmp_path) == before_tmp, name  # no run dir, no MLflow store
        assert snapshot(finished_run) == before_run, name


def test_config_file_with_command_line_overrides(tiny_dataset_dir, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("model: lightgcn\nembed_dim: 4\nlr: 1e-2\neval_ks: [10]\nlayers_unused: 1\n")
    code, _, err = run(["--config", str(config), "--data", str(tiny_dataset_dir)], capsys)
    assert code == 2 and "unknown setting(s) layers_unused" in err
    config.write_text("model: lightgcn\nembed_dim: 4\nlr: 1e-2\neval_ks: [10]\nbits: 8\n")
    out_dir = tmp_path / "run"
    argv = ["--config", str(config), "--data", str(tiny_dataset_dir), "--out", str(out_dir),
            "--bits", "32", "--model", "bprmf", "--epochs", "1", "--max-batches-per-epoch", "1",
            "--eval-ks", "5,20", "--score-bits", "32", "--normalize-bits", "8",
            "--set", "negative_slope=0.3",
            "--no-mlflow"]  # fmt: skip
    code, out, err = run(argv, capsys)
    assert code == 0, err
    metrics = json.loads((out_dir / "metrics.json").read_text())
    config_used = metrics["config"]
    assert (config_used["model"], config_used["bits"], config_used["embed_dim"]) == ("bprmf", 32, 4)
    assert config_used["lr"] == 0.01 and config_used["eval_ks"] == [5, 20]
    assert (config_used["score_bits"], config_used["normalize_bits"]) == (32, 8)
    assert config_used["extra"] == {"negative_slope": 0.3}
    assert {"recall@5", "ndcg@5", "recall@20", "ndcg@20"} <= metrics.keys()
    assert "test recall@20" in out and f"metrics: {out_dir / 'metrics.json'}" in out


def test_a_run_logs_to_mlflow_and_says_where(tiny_dataset_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default store is ./mlflow.db
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    argv = ["--data", str(tiny_dataset_dir), "--out", "run", "--experiment", "cli", *QUICK[:-1]]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    store = f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert f"in experiment 'cli' at {store}" in out
    run_id = json.loads((tmp_path / "run" / "mlflow_run.json").read_text())["run_id"]
    client = MlflowClient(store)
    logged = client.get_run(run_id)
    assert logged.info.status == "FINISHED" and f"mlflow:  run {run_id}" in out
    assert (
        logged.data.params["model"] == "bprmf"
        and logged.data.params["max_batches_per_epoch"] == "2"
    )
    assert [m.step for m in client.get_metric_history(run_id, "recall_at_20")] == [0, 1]
    assert len(client.get_metric_history(run_id, "epoch_seconds")) == 2
    assert {"test_recall_at_20", "activation_bytes", "peak_rss_bytes"} <= logged.data.metrics.keys()
    popular = json.loads((tmp_path / "run" / "metrics.json").read_text())["most_popular"]
    assert logged.data.metrics["test_most_popular_recall_at_20"] == popular["recall@20"]
    assert re.search(r"most popular recall@20\s+\d\.\d{4}", out)
    assert {a.path for a in client.list_artifacts(run_id)} == {
        "config.yaml", "metrics.json", "activation_memory.csv", "activation_memory.png",
    }  # fmt: skip


def train_command(data: Path, out: Path, store: Path, epochs: int, flags=()) -> list[str]:
    return [sys.executable, "-m", "pipelines.train", "--data", str(data), "--out", str(out),
            "--model", "bprmf", "--bits", "2", "--epochs", str(epochs), "--seed", "5",
            "--embed-dim", "16", "--batch-size", "64", "--max-batches-per-epoch", "12",
            "--device", "cpu", "--tracking-uri", f"sqlite:///{store}", *flags]  # fmt: skip


# KGAT on sampled subgraphs: batches and subgraphs made by a background thread
SAMPLED = ["--model", "kgat", "--layers", "2", "--sampler", "neighbor", "--fanouts", "4,4"]
# the same with its node table in host memory, a device cache smaller than it (and than a KG step
# of 2048 triples would need), 3 steps of look-ahead
OFFLOADED = [*SAMPLED, "--kg-batch-size", "64", "--offload-embeddings", "--cache-rows", "800", "--prefetch-steps", "3"]
# whole-graph KGAT whose node table keeps compact Adam state (stochastic rounding seeded per step)
COMPACT_ADAM = ["--model", "kgat", "--layers", "2", "--adam-state", "bfloat16"]
# offloaded with bfloat16 moments in RowTables (rounded with noise seeded per table step)
OFFLOADED_COMPACT = [*OFFLOADED, "--adam-state", "bfloat16"]


COMPARED = ("recall@20", "ndcg@20", "train_loss", "valid_history", "best_epoch", "best_valid",
            "activation_bytes", "epochs_trained")  # fmt: skip


@pytest.mark.parametrize(
    "flags",
    [[], SAMPLED, OFFLOADED, COMPACT_ADAM, OFFLOADED_COMPACT],
    ids=["whole-graph", "sampled", "offloaded", "adam-state-bfloat16", "offloaded-bfloat16"],
)
def test_kill_9_then_resume_ends_with_the_uninterrupted_metrics(flags, tiny_dataset_dir, tmp_path):
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    store, epochs = tmp_path / "mlflow.db", 6
    whole = tmp_path / "whole"
    subprocess.run(train_command(tiny_dataset_dir, whole, store, epochs, flags), cwd=REPO_ROOT,
                   env=env, check=True, capture_output=True, timeout=300)  # fmt: skip

    killed = tmp_path / "killed"
    process = subprocess.Popen(
        train_command(tiny_dataset_dir, killed, store, epochs, flags), cwd=REPO_ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not (killed / "checkpoint.pt").exists() and process.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert not (killed / "metrics.json").exists(), "the run finished before it was killed"

    resumed = subprocess.run(
        [*train_command(tiny_dataset_dir, killed, store, epochs, flags), "--resume"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed at epoch" in resumed.stdout
    expected = json.loads((whole / "metrics.json").read_text())
    got = json.loads((killed / "metrics.json").read_text())
    assert got["resumed_at_epoch"] >= 1
    assert {k: got[k] for k in COMPARED} == {k: expected[k] for k in COMPARED}
    assert len(got["epoch_seconds"]) == epochs

    client = MlflowClient(f"sqlite:///{store}")
    run_id = json.loads((killed / "mlflow_run.json").read_text())["run_id"]
    logged = client.get_run(run_id)  # the same MLflow run, reopened and finished
    assert logged.info.status == "FINISHED" and logged.data.tags["resumed"] == "true"
    steps = {m.step for m in client.get_metric_history(run_id, "train_loss")}
    assert steps == set(range(epochs))
    if "--sampler" in flags:  # the sampling settings as params, the waits for subgraphs as metrics
        assert logged.data.params["sampler"] == "neighbor"
        assert logged.data.params["fanouts"] == "[4, 4]"
        waits = client.get_metric_history(run_id, "sampler_wait_seconds")
        assert {m.step for m in waits} == set(range(epochs))
        assert len(got["sampler_wait_seconds"]) == epochs
    if "--offload-embeddings" in flags:  # the settings as params; the cache's figures in metrics.json
        assert logged.data.params["offload_embeddings"] == "True"
        assert logged.data.params["cache_rows"] == "800"
        assert got["row_tables"]["offload"] is True and got["row_tables"]["cache_rows"] == 800
        assert got["row_tables"]["stats"]["node_embedding"]["misses"] > 0
    if "--adam-state" in flags:
        assert logged.data.params["adam_state"] == "bfloat16"


@pytest.mark.parametrize("name", ["kgat", "kgin", "kgcn", "lightgcn", "bprmf", "quick"])
def test_example_configs_load_and_build(name, tiny_dataset_dir):
    from tinykg_train.config import TrainConfig
    from tinykg_train.models import build_model

    config = TrainConfig.from_yaml(REPO_ROOT / "configs" / f"{name}.yaml", {"data": "d"})
    assert build_model(config.model, tiny_dataset_dir, config).n_items > 0


def config_of(argv: list[str]):
    """The TrainConfig `pipelines.train ARGV` would run."""
    return load_config(build_parser().parse_args(argv))


def test_model_flag_brings_the_models_defaults_without_a_config_file():
    kgcn = config_of(["--model", "kgcn", "--data", "d"])
    assert (kgcn.embed_dim, kgcn.n_layers, kgcn.dropout, kgcn.batch_size) == (32, 1, 0.0, 1024)
    lightgcn = config_of(["--model", "lightgcn", "--data", "d"])
    assert (lightgcn.l2, lightgcn.dropout, lightgcn.batch_size) == (1e-4, 0.0, 2048)
    assert config_of(["--data", "d"]).batch_size == 1024  # kgat, the default model, brings its own


def test_config_file_and_flags_override_the_model_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: kgcn\nembed_dim: 48\nextra: {independence: cosine}\n")
    from_file = config_of(["--config", str(path), "--data", "d"])
    assert (from_file.model, from_file.embed_dim, from_file.n_layers) == ("kgcn", 48, 1)
    flags = config_of(
        ["--config", str(path), "--embed-dim", "24", "--set", "independence_weight=1e-4"]
    )
    assert (flags.embed_dim, flags.n_layers, flags.dropout) == (24, 1, 0.0)
    assert flags.extra == {"independence": "cosine", "independence_weight": 1e-4}  # merged, typed
    other = config_of(["--config", str(path), "--model", "kgin"])  # the flag's model's defaults
    assert (other.model, other.embed_dim, other.n_layers, other.n_intents) == ("kgin", 48, 3, 4)


def test_resume_keeps_the_saved_settings_over_the_model_defaults(finished_run):
    resumed = config_of(["--resume", "--out", str(finished_run)])
    assert (resumed.model, resumed.embed_dim, resumed.batch_size) == ("bprmf", 8, 256)
    assert resumed.resume and resumed.epochs == 2


def test_help_shows_the_library_compression_defaults(capsys):
    """Fails if `pipelines.train --help`, TrainConfig and CompressionConfig ever disagree."""
    from tinykg_train.compress import CompressionConfig
    from tinykg_train.compression_defaults import BITS
    from tinykg_train.config import TrainConfig

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    library, run_config = CompressionConfig(), TrainConfig().compression_config()
    assert library == run_config
    widths = ", ".join(map(str, BITS))
    for flag, field in (("--bits", "bits"), ("--scheme", "scheme"),
                        ("--score-bits", "score_bits"), ("--normalize-bits", "normalize_bits")):  # fmt: skip
        shown = re.search(rf"(?<!\[){flag} \S+ (.*?)\(default: ([^)]*)\)", text)
        assert shown, flag
        assert shown.group(2) == str(getattr(library, field)), flag
        if field != "scheme":
            assert widths in shown.group(0), flag
    assert "brings that model's own defaults" in text and "--threads N" in text


def test_the_summary_names_fp32_and_the_threads():
    result = {
        "model": "kgin", "bits": 32, "seed": 0, "device": "cpu", "torch_threads": 3,
        "epochs_trained": 1, "best_epoch": 0, "recall@20": 0.1, "activation_bytes": None,
        "epoch_seconds": [1.0], "peak_rss_bytes": 2**20,
    }  # fmt: skip
    table = result_table(result)
    assert "kgin fp32 seed 0" in table and "int32" not in table
    assert re.search(r"torch threads\s+3", table)
    assert "kgin int2 seed 0" in result_table({**result, "bits": 2})


def test_the_summary_sets_the_model_beside_the_most_popular_ranking():
    result = {
        "model": "kgat", "bits": 2, "seed": 0, "device": "cpu", "epochs_trained": 1,
        "best_epoch": 0, "recall@20": 0.3, "ndcg@20": 0.05, "activation_bytes": None,
        "epoch_seconds": [1.0], "peak_rss_bytes": 2**20,
        "most_popular": {"recall@20": 0.2, "ndcg@20": 0.0},
    }  # fmt: skip
    table = result_table(result)
    assert re.search(r"most popular recall@20\s+0\.2000 \(model 1\.50x\)", table)
    assert re.search(r"most popular ndcg@20\s+0\.0000$", table, re.M)  # no ratio over zero
    assert "most popular" not in result_table({**result, "most_popular": None})


AUTO = ["--model", "kgin", "--bits", "auto", "--auto-bits", "2", "--adapt-every", "2",
        "--embed-dim", "8", "--layers", "2", "--batch-size", "128", "--max-batches-per-epoch", "3",
        "--device", "cpu", "--seed", "3"]  # fmt: skip


def test_bits_auto_records_its_widths_and_resumes_with_them(tiny_dataset_dir, tmp_path, capsys):
    whole, split = tmp_path / "whole", tmp_path / "split"
    mlflow_store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = ["--data", str(tiny_dataset_dir), *AUTO, "--tracking-uri", mlflow_store]
    code, out, err = run([*argv, "--out", str(whole), "--epochs", "4"], capsys)
    assert code == 0, err
    assert "bits auto, cf phase:" in out and "bits on average" in out
    metrics = json.loads((whole / "metrics.json").read_text())
    plan = metrics["precision"]["phases"]["cf"]
    assert metrics["bits"] == "auto" and plan["epoch"] == 2  # measured at 0, again at 2
    assert plan["average_bits"] <= 2.0 and {s["bits"] for s in plan["sites"]} <= {1, 2, 4, 8, 32}
    table = (whole / "activation_memory.csv").read_text().splitlines()
    assert table[0] == "module,bytes,share,bits"
    run_id = json.loads((whole / "mlflow_run.json").read_text())["run_id"]
    params = MlflowClient(mlflow_store).get_run(run_id).data.params
    assert params["bits"] == "auto"
    assert params["bits_chosen.cf.epoch2.average"] == f"{plan['average_bits']:.2f}"
    layer = next(s for s in plan["sites"] if s["module"] == "layers.0")
    assert params["bits_chosen.cf.epoch2.layers.0"].split(",")[0] == str(layer["bits"])
    history = MlflowClient(mlflow_store).get_metric_history(run_id, "average_bits_cf")
    assert [m.step for m in history] == [0, 1, 2, 3] and history[-1].value == plan["average_bits"]

    assert run([*argv, "--out", str(split), "--epochs", "2"], capsys)[0] == 0
    code, out, err = run([*argv, "--out", str(split), "--epochs", "4", "--resume"], capsys)
    assert code == 0, err
    resumed = json.loads((split / "metrics.json").read_text())
    assert resumed["resumed_at_epoch"] == 2
    for key in ("recall@20", "ndcg@20", "train_loss", "activation_bytes"):
        assert resumed[key] == metrics[key], key
    assert resumed["precision"]["phases"] == metrics["precision"]["phases"]
