"""`python -m tinykg_kernels.bench`: a working CLI and a table whose byte counts are right."""

from __future__ import annotations

import subprocess
import sys

import torch

from tinykg_kernels import native
from tinykg_kernels.bench import Measurement, copy_gbps, measure, table


def test_help_and_a_tiny_run():
    help_run = subprocess.run(
        [sys.executable, "-m", "tinykg_kernels.bench", "--help"], capture_output=True, text=True
    )
    assert help_run.returncode == 0 and "usage: python -m tinykg_kernels.bench" in help_run.stdout
    run = subprocess.run(
        [sys.executable, "-m", "tinykg_kernels.bench", "--rows", "256", "--bits", "2", "8",
         "--device", "cpu", "--repeats", "1"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.strip().splitlines()
    assert lines[0].startswith("input [256, 64] float32 on cpu; a copy of it: ")
    rows = {line.split(" | ")[0][2:] for line in lines[3:]}
    assert lines[1].startswith("| backend | bits |") and len(lines) == 3 + 2 * len(rows)
    assert rows == {"torch", "cpu-inductor"} | ({"cpu-native"} if native.available() else set())
    assert "| torch | 2 | stochastic | 12.80 |" in run.stdout
    assert "| cpu-inductor | 8 | stochastic | 3.76 |" in run.stdout


def test_bandwidth_counts_input_and_stored_bytes():
    m = measure(torch.randn(512, 64), bits=2, backend="torch", repeats=1)
    assert (m.x_bytes, m.q_bytes) == (512 * 64 * 4, 512 * 20)
    assert m.quantize_gbps == (m.x_bytes + m.q_bytes) / m.quantize_s / 1e9
    fake = Measurement("triton", 2, (4, 64), True, 1e-6, 2e-6, 1024, 80)
    row = table([fake], copy=2.208).splitlines()[-1]
    assert row == "| triton | 2 | stochastic | 12.80 | 1.10 | 0.55 | 0.50 | 0.25 |"
    assert table([fake]).splitlines()[-1] == "| triton | 2 | stochastic | 12.80 | 1.10 | 0.55 |"
    assert copy_gbps(torch.randn(1024), repeats=1) > 0
