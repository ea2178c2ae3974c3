"""Backend choice: read at call time, never the interpreter under `auto`, clear refusals."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from tinykg_kernels import dequantize, dispatch, environment, native, quantize

CPU, CUDA, META = torch.device("cpu"), torch.device("cuda"), torch.device("meta")


def test_choice_follows_the_argument_then_the_environment(monkeypatch):
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    assert dispatch.requested_backend() == "auto"
    monkeypatch.setenv(dispatch.BACKEND_ENV, " Torch ")
    assert dispatch.requested_backend() == "torch"
    assert dispatch.requested_backend("triton") == "triton"
    monkeypatch.setenv(dispatch.BACKEND_ENV, "gpu")
    with pytest.raises(
        ValueError,
        match=r"TINYKG_KERNELS_BACKEND must be one of auto, torch, cpu-native, cpu-inductor, triton "
        r"\(got 'gpu'\)$",
    ):
        dispatch.requested_backend()


def test_a_read_once_block_reads_each_variable_once_then_the_environment_again(monkeypatch):
    monkeypatch.setenv(dispatch.BACKEND_ENV, "torch")
    monkeypatch.delenv(native.NATIVE_ENV, raising=False)
    with environment.read_once():
        assert dispatch.requested_backend() == "torch" and native.enabled()
        monkeypatch.setenv(dispatch.BACKEND_ENV, "auto")
        monkeypatch.setenv(native.NATIVE_ENV, "0")
        with environment.read_once():  # nested: the outermost block's values
            assert dispatch.requested_backend() == "torch" and native.enabled()
        assert dispatch.requested_backend("auto") == "auto"  # an argument still wins
    assert dispatch.requested_backend() == "auto" and not native.enabled()


def test_auto_keeps_cpu_tensors_off_triton_even_under_the_interpreter(monkeypatch, cpu_loops):
    monkeypatch.setattr(dispatch, "WITH_TRITON", True)
    big = dispatch.CPU_LOOPS_MIN_NUMEL
    assert dispatch.select_backend(CPU, "auto") == "torch"
    assert dispatch.select_backend(CPU, "auto", big - 1) == "torch"
    assert dispatch.select_backend(CPU, "auto", big) == cpu_loops
    assert dispatch.select_backend(META, "auto", big) == "torch"
    assert dispatch.select_backend(CUDA, "auto") == "triton"
    monkeypatch.setattr(dispatch, "WITH_TRITON", False)  # the flag is read at call time
    assert dispatch.select_backend(CUDA, "auto") == "torch"


def test_auto_stops_choosing_inductor_once_compiling_failed(monkeypatch):
    monkeypatch.setattr(dispatch.cpu_ops(), "_failure", "CppCompileError: no g++")
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    assert dispatch.select_backend(CPU, "auto", dispatch.CPU_LOOPS_MIN_NUMEL) == "torch"
    with pytest.raises(RuntimeError, match=r"'cpu-inductor' cannot run here: .*\(CppCompileError"):
        dispatch.select_backend(CPU, "cpu-inductor")


def test_forced_cpu_backends_refuse_a_cuda_tensor(cpu_loops):
    name = cpu_loops
    assert dispatch.select_backend(CPU, name) == name  # any size
    with pytest.raises(RuntimeError, match=rf"backend '{name}' runs CPU tensors \(got a cuda"):
        dispatch.select_backend(CUDA, name)


def test_forced_triton_without_triton_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(dispatch, "WITH_TRITON", False)
    with pytest.raises(RuntimeError, match=r"pip install 'tinykg-kernels\[triton\]'"):
        dispatch.select_backend(CUDA, "triton")


def test_forced_triton_refuses_a_cpu_tensor_unless_interpreted(monkeypatch):
    pytest.importorskip("triton")
    ops = dispatch.triton_ops()
    monkeypatch.setattr(dispatch, "WITH_TRITON", True)
    monkeypatch.setattr(ops, "INTERPRETED", False)
    with pytest.raises(
        RuntimeError, match="needs a CUDA tensor \\(got a cpu tensor\\).*TRITON_INTERPRET=1"
    ):
        dispatch.select_backend(CPU, "triton")
    monkeypatch.setattr(ops, "INTERPRETED", True)
    assert dispatch.select_backend(CPU, "triton") == "triton"
    with pytest.raises(RuntimeError, match="got a meta tensor"):
        dispatch.select_backend(META, "triton")


@pytest.fixture
def triton_calls(monkeypatch):
    """Count calls into the real Triton launchers (they still run)."""
    pytest.importorskip("triton")
    ops = dispatch.triton_ops()
    calls = []
    for name in ("quantize", "dequantize"):
        real = getattr(ops, name)
        monkeypatch.setattr(
            ops, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k)
        )
    return calls


def test_quantize_reads_the_environment_at_each_call(monkeypatch, triton_calls):
    if not dispatch.triton_ops().INTERPRETED:
        pytest.skip("needs Triton's interpreter for CPU tensors")
    x = torch.randn(9, 70)
    monkeypatch.setenv(dispatch.BACKEND_ENV, "torch")
    by_torch = quantize(x, stochastic=False)
    assert triton_calls == []
    monkeypatch.setenv(dispatch.BACKEND_ENV, "triton")
    by_triton = quantize(x, stochastic=False)
    back = dequantize(by_triton)
    assert triton_calls == ["quantize", "dequantize"]
    assert torch.equal(by_triton.codes, by_torch.codes)
    assert torch.equal(back, dequantize(by_torch, backend="torch"))


def test_auto_never_sends_a_cpu_tensor_to_triton(monkeypatch, triton_calls):
    monkeypatch.setenv(dispatch.BACKEND_ENV, "auto")
    x = torch.randn(9, 70)
    q = quantize(x, seed=0)
    dequantize(q)
    assert triton_calls == []
    assert torch.equal(q.codes, quantize(x, seed=0, backend="torch").codes)


def test_triton_is_imported_only_when_something_asks_for_it():
    """Importing the package and running CPU ops leaves Triton unimported (70 MiB resident);
    `WITH_TRITON` read from the package probes it then."""
    probe = textwrap.dedent("""
        import importlib.util, sys, torch
        import tinykg_kernels
        from tinykg_kernels import dequantize, dispatch, quantize
        dequantize(quantize(torch.randn(64, 64), bits=2))
        report = tinykg_kernels.runtime_report()
        assert "triton" not in sys.modules and "WITH_TRITON" not in vars(dispatch), "probed early"
        flag = tinykg_kernels.WITH_TRITON
        assert flag is dispatch.WITH_TRITON is dispatch.with_triton()
        assert ("triton" in sys.modules) is flag
        # before the probe the report says whether a triton package is there (not whether it imports)
        assert report["triton"] is (importlib.util.find_spec("triton") is not None)
        print("ok")
    """)
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
    )
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
