"""benchmarks/bench_memory.py: its one-step bytes are exactly the trainer's `activation_bytes`, and a
small run writes its BENCHMARKS.md section and figure."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.bench_memory import Measurement, goal_lines, main, measure_model
from tinykg_train.config import TrainConfig
from tinykg_train.trainer import train


@pytest.fixture
def redirected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """BENCHMARKS.md and figures redirected into `tmp_path`."""
    md, figures = tmp_path / "BENCHMARKS.md", tmp_path / "figures"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    monkeypatch.setenv("TINYKG_FIGURES_DIR", str(figures))
    return md, figures


def test_bytes_held_are_the_trainers_activation_bytes(tiny_dataset_dir: Path, tmp_path: Path):
    results = measure_model(tiny_dataset_dir, "kgat", [32, 2], torch.device("cpu"), repeats=1)
    for measured in results:
        config = TrainConfig(
            data=str(tiny_dataset_dir), model="kgat", bits=measured.bits, epochs=1,
            max_batches_per_epoch=1, device="cpu", out=str(tmp_path / f"run{measured.bits}"),
        )  # fmt: skip
        metrics = train(config)
        assert measured.activation_bytes == metrics["activation_bytes"] > 0
        assert measured.by_module == metrics["activation_bytes_by_module"]
        assert len(measured.step_seconds) == 1 and measured.median_seconds > 0
    fp32, int2 = results
    # the propagation layers at 2 bits; the root's scored embeddings at score_bits = 8, which on
    # this tiny graph are most of the bytes
    assert all(fp32.by_module[name] / int2.by_module[name] > 8 for name in fp32.by_module if name)
    assert fp32.activation_bytes / int2.activation_bytes > 4


def test_goal_lines_give_the_verdict():
    rows = [Measurement("kgat", 32, 1200), Measurement("kgat", 2, 100), Measurement("kgat", 1, 80)]
    lines = goal_lines(rows)
    assert lines == [
        "- kgat FP32 / INT2: **12.0x** (goal >= 10x: met)",
        "- kgat FP32 / INT1: **15.0x** (goal >= 16x: MISSED)",
    ]


def test_a_small_run_writes_its_section_and_figure(tiny_dataset_dir: Path, redirected, capsys):
    md, figures = redirected
    argv = ["--dataset", str(tiny_dataset_dir), "--models", "lightgcn,bprmf", "--bits", "2,32",
            "--repeats", "1", "--device", "cpu", "--threads", "1"]  # fmt: skip
    assert main(argv) == 0
    text = md.read_text()
    assert "<!-- begin:memory-tiny-cpu -->" in text and "<!-- end:memory-tiny-cpu -->" in text
    assert "| model | FP32 MiB | INT2 MiB |" in text  # FP32 first, whatever the order asked
    assert "| model | FP32 ms | INT2 ms |" in text
    assert text.count("| lightgcn |") == 2 and text.count("| bprmf |") == 2
    assert "\n\n\n" not in text  # no KGAT, so no goal lines: no empty paragraph in their place
    assert "benchmarks/figures/memory-tiny-cpu.png" in text
    assert (figures / "memory-tiny-cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Kernel calls by the backend that ran them: " in text and "quantize: " in text


@pytest.mark.cuda
def test_cuda_section_has_the_step_peak(tiny_dataset_dir: Path, redirected):
    md, figures = redirected
    argv = ["--dataset", str(tiny_dataset_dir), "--models", "kgat", "--bits", "32,2",
            "--repeats", "1", "--device", "cuda"]  # fmt: skip
    assert main(argv) == 0
    text = md.read_text()
    assert "<!-- begin:memory-tiny-cuda -->" in text and torch.cuda.get_device_name(0) in text
    assert text.count("| model | FP32 MiB | INT2 MiB |") == 2  # held for backward, step peak
    assert (figures / "memory-tiny-cuda.png").is_file()


def test_peak_run_writes_its_section_with_each_widths_breakdown(
    tiny_dataset_dir: Path, redirected, tmp_path: Path
):
    """`--peak`: a fresh process per cell; the section is named by the rule (it once was not, and
    the run failed at its very end)."""
    md, _ = redirected
    cells = tmp_path / "cells.json"
    argv = ["--peak", "--dataset", str(tiny_dataset_dir), "--models", "lightgcn", "--bits", "2",
            "--steps", "1", "--device", "cpu", "--save", str(cells)]  # fmt: skip
    assert main(argv) == 0
    text = md.read_text()
    assert "<!-- begin:memory-peak-tiny-cpu -->" in text
    assert text.count("| lightgcn |") == 2  # FP32 first, then INT2
    assert "peak RSS" in text and cells.is_file()
