"""Which backend runs a call (`torch` or `triton`), decided at call time.

Triton is probed once at import (the PyG way: a `WITH_TRITON` flag that call sites read when they run,
so a test can switch it off). The choice then follows `backend=` if given, else the
`TINYKG_KERNELS_BACKEND` environment variable (`auto`, `torch` or `triton`; default `auto`):

- `auto`: Triton for CUDA tensors when it is importable, torch for everything else. A CPU tensor never
  goes to Triton under `auto`, not even with `TRITON_INTERPRET=1` set (the interpreter is for tests).
- `torch`: the pure-torch codec on any device.
- `triton`: CUDA tensors; CPU tensors only when the kernels were defined under the interpreter
  (`TRITON_INTERPRET=1` set before triton was first imported). Anything else raises: a CPU tensor
  must never reach a real Triton launch ("0 active drivers").
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import torch

try:  # an optional extra: `pip install tinykg-kernels[triton]`
    import triton  # noqa: F401

    WITH_TRITON = True
except Exception:  # ImportError, or a broken install that fails while importing
    WITH_TRITON = False

BACKEND_ENV = "TINYKG_KERNELS_BACKEND"
BACKENDS = ("auto", "torch", "triton")


def requested_backend(backend: str | None = None) -> str:
    """`backend` if given, else `$TINYKG_KERNELS_BACKEND`, else `auto`; validated."""
    choice = backend if backend is not None else os.environ.get(BACKEND_ENV, "auto")
    choice = choice.strip().lower() or "auto"
    if choice not in BACKENDS:
        source = "backend" if backend is not None else BACKEND_ENV
        raise ValueError(f"{source} must be one of auto, torch, triton (got {choice!r})")
    return choice


def triton_ops() -> ModuleType:
    """The Triton kernels module (imported on first use, so its kernels see the environment then)."""
    return importlib.import_module("tinykg_kernels.triton_ops")


def select_backend(device: torch.device, backend: str | None = None) -> str:
    """`"torch"` or `"triton"` for a tensor on `device`; raises when `triton` is forced but impossible."""
    choice = requested_backend(backend)
    if choice == "torch":
        return "torch"
    if choice == "auto":
        return "triton" if WITH_TRITON and device.type == "cuda" else "torch"
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
