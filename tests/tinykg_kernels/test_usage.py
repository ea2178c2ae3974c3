"""What ran is recorded: per op and backend, as it actually ran (after `auto`'s choice and any step
down), only the calls after a snapshot, and a runtime report a training run can store."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch

import tinykg_kernels
from tinykg_kernels import (
    backend_usage,
    backends_used,
    dequantize,
    dispatch,
    native,
    quantize,
    runtime_report,
    usage,
)

PYPROJECT = Path(__file__).parents[2] / "packages" / "tinykg_kernels" / "pyproject.toml"


def test_a_big_cpu_quantize_is_recorded_as_the_loops_that_ran_and_a_tiny_one_as_torch(
    cpu_loops, monkeypatch
):
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)  # auto
    before = backend_usage()
    q = quantize(torch.randn(1024, 64), bits=2)  # 65,536 elements: the CPU loops
    quantize(torch.randn(4, 8), bits=2)  # 32 elements: torch
    dequantize(q)
    assert backend_usage(since=before) == {
        "dequantize": {cpu_loops: 1},
        "quantize": {cpu_loops: 1, "torch": 1},
    }


def test_a_float16_tensor_under_cpu_native_is_recorded_as_inductor_s_loops():
    """The native codec takes float32 with bfloat16 parameters; other dtypes step down."""
    if not native.available():
        pytest.skip("no native library here")
    before = backend_usage()
    quantize(torch.randn(64, 64, dtype=torch.float16), backend="cpu-native")
    assert backend_usage(since=before) == {"quantize": {"cpu-inductor": 1}}


def test_since_keeps_only_later_calls_and_drops_unchanged_entries():
    before = backend_usage()
    usage.record("quantize", "torch")
    usage.record("quantize", "torch")
    usage.record("csr_matmul", "cpu-native")
    assert backend_usage(since=before) == {
        "csr_matmul": {"cpu-native": 1},
        "quantize": {"torch": 2},
    }
    assert backends_used(backend_usage(since=before)) == ["cpu-native", "torch"]
    assert backend_usage(since=backend_usage()) == {}


def test_the_runtime_report_names_version_request_library_and_what_ran(monkeypatch):
    monkeypatch.setenv(dispatch.BACKEND_ENV, "torch")
    before = backend_usage()
    quantize(torch.randn(256, 64))
    report = runtime_report(since=before)
    version = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    assert report["version"] == tinykg_kernels.__version__ == version
    assert report["backend_requested"] == "torch"
    assert report["backends"] == {"quantize": {"torch": 1}}
    assert report["native_library"] in ("loaded", "not loaded") or report[
        "native_library"
    ].startswith(("off", "unavailable"))
    assert report["triton"] is dispatch.WITH_TRITON
    monkeypatch.setenv(dispatch.BACKEND_ENV, "compiled")
    assert runtime_report()["backend_requested"].startswith("invalid: TINYKG_KERNELS_BACKEND")


def test_the_old_name_compiled_is_refused_with_the_new_names():
    with pytest.raises(
        ValueError,
        match=r"one of auto, torch, cpu-native, cpu-inductor, triton \(got 'compiled'\) "
        r"\('compiled' was split by what runs: 'cpu-native' for the C\+\+ loops",
    ):
        quantize(torch.randn(4, 4), backend="compiled")
