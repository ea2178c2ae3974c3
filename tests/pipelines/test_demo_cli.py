"""python -m pipelines.demo: synthetic data -> ingest -> KGAT FP32 and INT2 -> MLflow -> a table."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipelines._cli import run_cli
from pipelines.demo import DEMO_MARKER, comparison_table, main

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY = ["--users", "150", "--epochs", "2", "--max-batches-per-epoch", "3", "--device", "cpu"]


@pytest.fixture(scope="module")
def demo_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, str, subprocess.CompletedProcess]:
    """The demo end to end at a tiny size, as a user runs it (a subprocess from the repo root)."""
    tmp = tmp_path_factory.mktemp("demo")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.demo",
            "--out",
            str(tmp / "demo"),
            "--tracking-uri",
            uri,
            *TINY,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp / "demo", uri, result


def table_rows(stdout: str) -> dict[str, list[str]]:
    """The comparison table's data rows by their first cell (FP32, INT2)."""
    rows = {}
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) == 6 and re.fullmatch(r"FP32|INT\d", cells[0]):
            rows[cells[0]] = cells[1:]
    return rows


def test_demo_prints_the_comparison_table(demo_run):
    _, uri, result = demo_run
    assert "bits | activation MB | compression | Recall@20 | NDCG@20 | s/epoch" in result.stdout
    rows = table_rows(result.stdout)
    assert set(rows) == {"FP32", "INT2"}
    fp32_mb, int2_mb = float(rows["FP32"][0]), float(rows["INT2"][0])
    assert rows["FP32"][1] == "1.0x"
    assert float(rows["INT2"][1].rstrip("x")) == pytest.approx(fp32_mb / int2_mb, rel=0.02)
    # > 4, not ~12: on this 150-user graph the batch's scored embeddings, kept at score_bits = 8,
    # are most of what INT2 holds
    assert fp32_mb / int2_mb > 4, "INT2 should hold far less activation memory than FP32"
    for cells in rows.values():
        recall, ndcg, seconds = map(float, cells[2:])
        assert 0 <= recall <= 1 and 0 <= ndcg <= 1 and seconds > 0
    assert f"mlflow ui --backend-store-uri {uri} --host 127.0.0.1" in result.stdout


def test_demo_sets_the_most_popular_ranking_beneath_the_widths(demo_run):
    out, _, result = demo_run
    popular = json.loads((out / "runs" / "kgat-fp32" / "metrics.json").read_text())["most_popular"]
    row = next(line for line in result.stdout.splitlines() if line.startswith("most popular"))
    cells = [cell.strip() for cell in row.split("|")]
    assert cells == [
        "most popular", "-", "-", f"{popular['recall@20']:.4f}", f"{popular['ndcg@20']:.4f}", "-",
    ]  # fmt: skip


def test_demo_logs_both_runs_to_mlflow(demo_run):
    out, uri, result = demo_run
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tinykg-demo")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(run.data.params["bits"] for run in runs) == ["2", "32"]
    for run in runs:
        assert run.info.status == "FINISHED"
        assert run.data.params["model"] == "kgat"
        assert {"test_recall_at_20", "test_ndcg_at_20", "activation_bytes"} <= set(run.data.metrics)
        assert len(client.get_metric_history(run.info.run_id, "epoch_seconds")) == 2
        assert run.info.run_id in result.stdout
    for width in ("fp32", "int2"):
        assert (out / "runs" / f"kgat-{width}" / "metrics.json").is_file()
    assert "torch threads: " in result.stdout
    assert (out / "dataset" / "metadata.json").is_file() and (
        out / "raw" / "kg_final.txt"
    ).is_file()


def test_demo_refuses_to_overwrite_without_being_asked(demo_run, capsys):
    out, _, _ = demo_run
    assert run_cli(main, ["--out", str(out), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds an earlier demo; pass --overwrite" in err


def test_demo_never_deletes_a_dir_it_did_not_write(tmp_path, capsys):
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    assert run_cli(main, ["--out", str(precious), "--overwrite", *TINY]) == 2
    assert "was not written by the demo" in capsys.readouterr().err
    assert (precious / "notes.txt").read_text() == "keep me" and not (
        precious / DEMO_MARKER
    ).exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bits", "3"], "--bits needs a comma list of 1, 2, 4, 8, 32 (got '3')"),
        (["--bits", "two"], "--bits needs a comma list of 1, 2, 4, 8, 32 (got 'two')"),
        (["--users", "10"], "--users needs to be at least 50 (got 10)"),
        (["--epochs", "0"], "--epochs needs to be a positive integer (got 0)"),
        (["--threads", "0"], "--threads needs to be a positive integer (got 0)"),
    ],
)
def test_bad_arguments_exit_2_before_writing(argv, message, tmp_path, capsys):
    out = tmp_path / "demo"
    assert run_cli(main, ["--out", str(out), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_comparison_table_is_relative_to_fp32():
    results = [
        {"bits": 32, "activation_bytes": 12_800_000, "recall@20": 0.3, "ndcg@20": 0.2, "epoch_seconds": [1.0, 3.0]},
        {"bits": 2, "activation_bytes": 1_000_000, "recall@20": 0.29, "ndcg@20": 0.19, "epoch_seconds": [2.0]},
    ]  # fmt: skip
    lines = comparison_table(results).splitlines()
    assert [c.strip() for c in lines[2].split("|")] == [
        "FP32",
        "12.80",
        "1.0x",
        "0.3000",
        "0.2000",
        "2.00",
    ]
    assert [c.strip() for c in lines[3].split("|")] == [
        "INT2",
        "1.00",
        "12.8x",
        "0.2900",
        "0.1900",
        "2.00",
    ]


def test_help_describes_the_demo(pipeline_help):
    result = pipeline_help("demo")
    assert result.returncode == 0
    assert "FP32" in result.stdout and "--out" in result.stdout
