"""benchmarks/bench_accuracy.py: a small matrix trains through the trainer, writes its section and
figure, is read back rather than re-run, resumes a run that has only a checkpoint, and refuses a run
dir made with other settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks.bench_accuracy import main


def metrics_files(out: Path) -> dict[str, dict]:
    return {
        str(p.parent.relative_to(out)): json.loads(p.read_text())
        for p in sorted(out.rglob("metrics.json"))
    }


def test_matrix_trains_reports_resumes_and_refuses_stale_runs(
    tiny_dataset_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    md, figures, out = tmp_path / "BENCHMARKS.md", tmp_path / "figures", tmp_path / "runs"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    monkeypatch.setenv("TINYKG_FIGURES_DIR", str(figures))
    argv = ["--datasets", str(tiny_dataset_dir), "--models", "kgat,bprmf", "--bits", "2,32",
            "--seeds", "0,1", "--epochs", "2", "--max-batches-per-epoch", "2",
            "--set", "embed_dim=16", "--device", "cpu", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    runs = metrics_files(out)
    name = tiny_dataset_dir.name
    assert sorted(runs) == sorted(
        f"{name}/{m}/{w}/seed{s}"
        for m in ("kgat", "bprmf")
        for w in ("fp32", "int2")
        for s in (0, 1)
    )
    kgat = runs[f"{name}/kgat/int2/seed1"]
    assert (kgat["model"], kgat["bits"], kgat["seed"], kgat["config"]["embed_dim"]) == (
        "kgat",
        2,
        1,
        16,
    )
    assert kgat["config"]["batch_size"] == 1024  # configs/kgat.yaml is the base

    text = md.read_text()
    assert "<!-- begin:accuracy-tiny-cpu -->" in text and text.count("<!-- begin:") == 1
    assert f"### {name}" in text and text.count("| kgat | INT2 | 2 |") == 1
    assert "- KGAT INT2 / FP32 test Recall@20: **" in text
    assert "- KGAT vs BPR-MF at FP32, test Recall@20: **" in text
    assert "Kernel backends that ran (tinykg_kernels, from metrics.json): " in text
    assert (figures / "accuracy-tiny-cpu.png").read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()

    # Another run on the same dataset and device replaces the section, whatever its models.
    assert main([*argv[:2], "--models", "bprmf", *argv[4:]]) == 0
    text = md.read_text()
    assert text.count("<!-- begin:accuracy-tiny-cpu -->") == 1 and "| kgat |" not in text
    assert "| bprmf | INT2 |" in text
    capsys.readouterr()

    # Finished runs are read back, not trained again.
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("metrics.json")}
    assert main([*argv, "--no-write"]) == 0
    assert "training" not in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.rglob("metrics.json")} == stamps

    # A run with a checkpoint but no metrics.json (killed before the end) is resumed.
    (out / name / "kgat" / "int2" / "seed1" / "metrics.json").unlink()
    assert main([*argv, "--no-write"]) == 0
    assert "kgat int2 seed 1: training" in capsys.readouterr().out
    resumed = metrics_files(out)[f"{name}/kgat/int2/seed1"]
    assert resumed["recall@20"] == kgat["recall@20"] and resumed["resumed_at_epoch"] == 2

    # Other settings than the finished runs': refused in one line, nothing trained.
    assert main([*argv[:-2], "--out", str(out), "--set", "lr=0.01"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "lr: 0.001 -> 0.01" in err and "another --out" in err

    # A compression setting only makes the compressed runs stale: FP32 runs never read it.
    assert main([*argv[:-2], "--out", str(out), "--set", "score_bits=32"]) == 2
    err = capsys.readouterr().err.strip()
    assert "/int2/" in err and "score_bits: 8 -> 32" in err


def test_a_spent_budget_starts_nothing_and_leaves_the_report_alone(
    tiny_dataset_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    argv = ["--datasets", str(tiny_dataset_dir), "--models", "bprmf", "--seeds", "0",
            "--device", "cpu", "--out", str(tmp_path / "runs"), "--budget-s", "0"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "budget of 0 s spent" in out and "nothing to report" in out
    assert not md.exists() and not (tmp_path / "runs").exists()


@pytest.mark.cuda
def test_a_cuda_matrix_lands_in_its_own_section(
    tiny_dataset_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    monkeypatch.setenv("TINYKG_FIGURES_DIR", str(tmp_path / "figures"))
    argv = ["--datasets", str(tiny_dataset_dir), "--models", "kgat", "--bits", "32,2",
            "--seeds", "0", "--epochs", "1", "--max-batches-per-epoch", "2",
            "--device", "cuda", "--out", str(tmp_path / "runs")]  # fmt: skip
    assert main(argv) == 0
    text = md.read_text()
    assert "<!-- begin:accuracy-tiny-cuda -->" in text and torch.cuda.get_device_name(0) in text
    assert "(the <= 1.10 goal is for the CPU)" in text
