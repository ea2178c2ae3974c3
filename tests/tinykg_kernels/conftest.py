"""Shared fixtures of the kernels tests."""

from __future__ import annotations

import pytest

from tinykg_kernels import cpu_ops, native


@pytest.fixture
def no_compiler(monkeypatch):
    """The CPU loops as on a machine without a C++ compiler: no native library, and every inductor
    compile raises (once it has failed, the process runs the torch path); restored after the test."""
    monkeypatch.setattr(cpu_ops, "_failure", None)
    monkeypatch.setenv(native.NATIVE_ENV, "0")  # the native loops need the compiler too

    def failing(*key):
        def fail(*args):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")

        return fail

    monkeypatch.setattr(cpu_ops, "_compiled", failing)


def _use(backend: str, monkeypatch) -> str:
    """`backend`, skipped where it cannot run; `auto` inside the test follows it on the CPU (the
    native loops are turned off for `cpu-inductor`)."""
    if backend == "cpu-native" and not native.available():
        pytest.skip(f"no native library here: {native.failure()}")
    monkeypatch.setenv(native.NATIVE_ENV, "0" if backend == "cpu-inductor" else "1")
    return backend


@pytest.fixture(params=["cpu-native", "cpu-inductor"])
def cpu_loops(request, monkeypatch) -> str:
    """Runs a test with each CPU backend's loops: the native ones (`tinykg_kernels.native`, where
    they apply) and inductor's; the value is the backend's name."""
    return _use(request.param, monkeypatch)


@pytest.fixture(params=["torch", "cpu-native", "cpu-inductor"])
def backend(request, monkeypatch) -> str:
    """Runs a test on every backend a CPU tensor can take: torch's ops and both CPU loops."""
    return _use(request.param, monkeypatch)
