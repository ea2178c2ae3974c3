"""Which backend runs a call (`torch`, `compiled` or `triton`), decided at call time.

Triton is probed once at import (the PyG way: a `WITH_TRITON` flag that call sites read when they run,
so a test can switch it off). The choice then follows `backend=` if given, else the
`TINYKG_KERNELS_BACKEND` environment variable (`auto`, `torch`, `compiled` or `triton`; default
`auto`):

- `auto`: Triton for CUDA tensors when it is importable; for CPU tensors of at least
  `COMPILED_MIN_NUMEL` elements the `compiled` backend (unless compiling failed in this process);
  torch for everything else. A CPU tensor never goes to Triton under `auto`, not even with
  `TRITON_INTERPRET=1` set (the interpreter is for tests).
- `torch`: the pure-torch codec on any device.
- `compiled`: the torch.compile'd codec (`compiled_ops`), CPU tensors only.
- `triton`: CUDA tensors; CPU tensors only when the kernels were defined under the interpreter
  (`TRITON_INTERPRET=1` set before triton was first imported). Anything else raises: a CPU tensor
  must never reach a real Triton launch ("0 active drivers").
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import torch

try:  # an optional extra: `pip install tinykg-kernels[triton]`
    import triton  # noqa: F401

    WITH_TRITON = True
except Exception:  # ImportError, or a broken install that fails while importing
    WITH_TRITON = False

BACKEND_ENV = "TINYKG_KERNELS_BACKEND"
BACKENDS = ("auto", "torch", "compiled", "triton")
# below this many elements `auto` keeps CPU tensors on the eager path: a one-off compile (seconds per
# shape family) does not pay for tensors that take a fraction of a millisecond to quantize eagerly
# (from [64, 64] float32 up the compiled quantize is faster: 72 vs 182 us on one core; KGIN's
# [120, 120] distance matrices, compressed 600 times an epoch on music-kgcn, are above it)
COMPILED_MIN_NUMEL = 1 << 12


def requested_backend(backend: str | None = None) -> str:
    """`backend` if given, else `$TINYKG_KERNELS_BACKEND`, else `auto`; validated."""
    choice = backend if backend is not None else os.environ.get(BACKEND_ENV, "auto")
    choice = choice.strip().lower() or "auto"
    if choice not in BACKENDS:
        source = "backend" if backend is not None else BACKEND_ENV
        raise ValueError(f"{source} must be one of {', '.join(BACKENDS)} (got {choice!r})")
    return choice


def _module(name: str) -> ModuleType:
    """`importlib.import_module(name)`, looked up in `sys.modules` first (these run on every
    codec call; the import machinery costs microseconds even for a loaded module)."""
    module = sys.modules.get(name)
    return module if module is not None else importlib.import_module(name)


def triton_ops() -> ModuleType:
    """The Triton kernels module (imported on first use, so its kernels see the environment then)."""
    return _module("tinykg_kernels.triton_ops")


def compiled_ops() -> ModuleType:
    """The torch.compile'd CPU codec (imported on first use: it imports `bitmask`, which imports
    this module)."""
    return _module("tinykg_kernels.compiled_ops")


def select_backend(device: torch.device, backend: str | None = None, numel: int = 0) -> str:
    """`"torch"`, `"compiled"` or `"triton"` for `numel` elements on `device`; raises when a backend
    is forced but impossible."""
    choice = requested_backend(backend)
    if choice == "torch":
        return "torch"
    if choice == "auto":
        if device.type == "cuda":
            return "triton" if WITH_TRITON else "torch"
        if (
            device.type == "cpu"
            and numel >= COMPILED_MIN_NUMEL
            and compiled_ops().failure() is None
        ):
            return "compiled"
        return "torch"
    if choice == "compiled":
        if device.type != "cpu":
            raise RuntimeError(
                f"backend 'compiled' runs CPU tensors (got a {device.type} tensor); "
                "use backend 'auto' (Triton on CUDA) or 'torch'"
            )
        return "compiled"
    if not WITH_TRITON:
        raise RuntimeError(
            "backend 'triton' was requested but triton is not importable; "
            "install it with `pip install 'tinykg-kernels[triton]'` or use backend 'torch'"
        )
    if device.type == "cuda" or (device.type == "cpu" and triton_ops().INTERPRETED):
        return "triton"
    raise RuntimeError(
        f"backend 'triton' needs a CUDA tensor (got a {device.type} tensor); for CPU tensors set "
        "TRITON_INTERPRET=1 before triton is first imported, or use backend 'auto' or 'torch'"
    )
