"""Shared fixtures of the kernels tests."""

from __future__ import annotations

import pytest

from tinykg_kernels import compiled_ops


@pytest.fixture
def no_compiler(monkeypatch):
    """The compiled backend as on a machine without a C++ compiler: every compile raises (once
    it has failed, the process runs the torch path); restored after the test."""
    monkeypatch.setattr(compiled_ops, "_failure", None)

    def failing(*key):
        def fail(*args):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")

        return fail

    monkeypatch.setattr(compiled_ops, "_compiled", failing)
