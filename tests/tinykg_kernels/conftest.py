"""Shared fixtures of the kernels tests."""

from __future__ import annotations

import pytest

from tinykg_kernels import compiled_ops, native


@pytest.fixture
def no_compiler(monkeypatch):
    """The compiled backend as on a machine without a C++ compiler: every compile raises (once
    it has failed, the process runs the torch path); restored after the test."""
    monkeypatch.setattr(compiled_ops, "_failure", None)
    monkeypatch.setenv(native.NATIVE_ENV, "0")  # the native loops need the compiler too

    def failing(*key):
        def fail(*args):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")

        return fail

    monkeypatch.setattr(compiled_ops, "_compiled", failing)


@pytest.fixture(params=["native", "inductor"])
def cpu_loops(request, monkeypatch):
    """Runs a test twice: with the native loops (`tinykg_kernels.native`, where they apply) and
    with inductor's only (`TINYKG_KERNELS_NATIVE=0`)."""
    if request.param == "native" and not native.available():
        pytest.skip(f"no native codec here: {native.failure()}")
    monkeypatch.setenv(native.NATIVE_ENV, "1" if request.param == "native" else "0")
    return request.param
