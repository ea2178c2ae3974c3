"""Which backend runs a call, decided at call time; each is named after what runs:

- `torch`: plain torch ops (`reference.py` and friends), on any device.
- `cpu-native`: C++ loops built on first use (`tinykg_kernels.native`), CPU tensors.
- `cpu-inductor`: the same math fused into loops by inductor, torch.compile's compiler
  (`cpu_ops.py`), CPU tensors. Same bits as `cpu-native`, slower.
- `triton`: Triton kernels (`triton_ops.py`), CUDA tensors.

Triton is probed once, when a CUDA tensor first asks for a backend (importing it adds about 70 MiB
to the resident set, which a CPU-only run never uses): the result is the module's `WITH_TRITON`
flag (the PyG way: call sites read it when they run, so a test can switch it off).

The choice follows `backend=` if given, else the `TINYKG_KERNELS_BACKEND` environment variable
(read per call, or once for an `environment.read_once` block such as a training step's), else
`auto`:

- `auto`: Triton for CUDA tensors when it is importable; for CPU tensors of at least
  `CPU_LOOPS_MIN_NUMEL` elements `cpu-native` when its library loads, else `cpu-inductor` unless
  compiling failed in this process; torch for everything else. A CPU tensor never goes to Triton
  under `auto`, not even with `TRITON_INTERPRET=1` set (the interpreter is for tests).
- A named backend runs every call it can; one that is impossible in this process raises (no
  native library for `cpu-native`, a failed compile for `cpu-inductor`, a tensor on the wrong
  device; `triton` takes CPU tensors only when its kernels were defined under the interpreter).
- Ops or dtypes a backend has no loops for step down: `cpu-native` -> `cpu-inductor` -> `torch`
  (the native codec takes float32 with bfloat16 parameters; bit masks have inductor loops only;
  the CSR product has native and torch only), `triton` -> `torch`. `usage.backend_usage()` records
  what each call actually ran.

The old name `compiled` (native or inductor loops, whichever applied) is refused with the new names.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from types import ModuleType

import torch

from tinykg_kernels import environment, native


def with_triton() -> bool:
    """Whether Triton imports in this process (an optional extra: `pip install
    tinykg-kernels[triton]`): probed on the first call, then read from `WITH_TRITON`."""
    probed = globals().get("WITH_TRITON")
    if probed is None:
        try:
            import triton  # noqa: F401

            probed = True
        except Exception:  # ImportError, or a broken install that fails while importing
            probed = False
        globals()["WITH_TRITON"] = probed
    return probed


def triton_installed() -> bool:
    """`with_triton()` once probed; before that, whether a `triton` package is installed (looked up
    without importing it, for reports written by CPU-only runs)."""
    probed = globals().get("WITH_TRITON")
    return probed if probed is not None else importlib.util.find_spec("triton") is not None


def __getattr__(name: str):
    """`dispatch.WITH_TRITON` read before the first probe runs the probe."""
    if name == "WITH_TRITON":
        return with_triton()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


BACKEND_ENV = "TINYKG_KERNELS_BACKEND"
BACKENDS = ("auto", "torch", "cpu-native", "cpu-inductor", "triton")
RUNNING_BACKENDS = BACKENDS[1:]  # what a call runs on (and what `usage` records)
CPU_BACKENDS = ("cpu-native", "cpu-inductor")
# below this many elements `auto` keeps CPU tensors on the eager path: a one-off compile (seconds per
# shape family) does not pay for tensors that take a fraction of a millisecond to quantize eagerly
# (from [64, 64] float32 up the inductor quantize is faster: 72 vs 182 us on one core; KGIN's
# [120, 120] distance matrices, compressed 600 times an epoch on music-kgcn, are above it)
CPU_LOOPS_MIN_NUMEL = 1 << 12


def requested_backend(backend: str | None = None) -> str:
    """`backend` if given, else `$TINYKG_KERNELS_BACKEND`, else `auto`; validated. (The variable is
    read per call, or once for an `environment.read_once` block.)"""
    if backend is not None:
        return _validated(backend, "backend")
    return _validated(environment.get(BACKEND_ENV, "auto"), BACKEND_ENV)


@functools.lru_cache(maxsize=64)
def _validated(raw: str, source: str) -> str:
    """`raw` (from `source`) as a backend name, or a ValueError; each string parsed once (every
    codec call asks: the environment is read per call or block, so a test or a user may change it)."""
    choice = raw.strip().lower() or "auto"
    if choice not in BACKENDS:
        renamed = (
            " ('compiled' was split by what runs: 'cpu-native' for the C++ loops, 'cpu-inductor' "
            "for inductor's)"
            if choice == "compiled"
            else ""
        )
        raise ValueError(f"{source} must be one of {', '.join(BACKENDS)} (got {choice!r}){renamed}")
    return choice


def _module(name: str) -> ModuleType:
    """`importlib.import_module(name)`, looked up in `sys.modules` first (these run on every
    codec call; the import machinery costs microseconds even for a loaded module)."""
    module = sys.modules.get(name)
    return module if module is not None else importlib.import_module(name)


def triton_ops() -> ModuleType:
    """The Triton kernels module (imported on first use, so its kernels see the environment then)."""
    return _module("tinykg_kernels.triton_ops")


def triton_planes() -> ModuleType:
    """The Triton kernels of the plane-layout masks (imported on first use, as `triton_ops`)."""
    return _module("tinykg_kernels.triton_planes")


def cpu_ops() -> ModuleType:
    """The CPU loops of the codec and bit masks, native or inductor's (imported on first use: it
    imports `bitmask`, which imports this module)."""
    return _module("tinykg_kernels.cpu_ops")


def select_backend(device: torch.device, backend: str | None = None, numel: int = 0) -> str:
    """`"torch"`, `"cpu-native"`, `"cpu-inductor"` or `"triton"` for `numel` elements on `device`
    (before an op steps down for what it lacks); raises when a named backend is impossible."""
    choice = requested_backend(backend)
    if choice == "torch":
        return "torch"
    if choice == "auto":
        kind = device.type  # a new string per read
        if kind == "cuda":
            return "triton" if with_triton() else "torch"
        if kind == "cpu" and numel >= CPU_LOOPS_MIN_NUMEL:
            if native.available():
                return "cpu-native"
            if cpu_ops().failure() is None:
                return "cpu-inductor"
        return "torch"
    if choice in CPU_BACKENDS:
        return _check_cpu_backend(choice, device)
    if not with_triton():
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


def _check_cpu_backend(choice: str, device: torch.device) -> str:
    if device.type != "cpu":
        raise RuntimeError(
            f"backend {choice!r} runs CPU tensors (got a {device.type} tensor); "
            "use backend 'auto' (Triton on CUDA) or 'torch'"
        )
    if choice == "cpu-native" and not native.available():
        raise RuntimeError(
            f"backend 'cpu-native' cannot run here: the native library is {native.status()}; "
            "use backend 'cpu-inductor' or 'auto' (or install a C++ compiler, e.g. g++)"
        )
    if choice == "cpu-inductor" and cpu_ops().failure() is not None:
        raise RuntimeError(
            f"backend 'cpu-inductor' cannot run here: torch.compile failed in this process "
            f"({cpu_ops().failure()}); use backend 'torch' or 'auto'"
        )
    return choice
