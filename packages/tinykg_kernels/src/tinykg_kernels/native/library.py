"""Building and loading the native library: the C++ sources beside this file compiled once per
machine into `$TINYKG_KERNELS_CACHE` (default `~/.cache/tinykg_kernels`), keyed by the sources,
compiler, flags and CPU, loaded with ctypes, and the argument types of its functions declared."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

from tinykg_kernels import environment

NATIVE_ENV = "TINYKG_KERNELS_NATIVE"
CACHE_ENV = "TINYKG_KERNELS_CACHE"
SOURCES = tuple(Path(__file__).with_name(name) for name in ("codec.cpp", "spmm.cpp", "planes.cpp"))
HEADERS = (Path(__file__).with_name("vectors.h"),)  # included by the sources
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-std=c++17", "-shared", "-fPIC")

_failure: str | None = None  # why the library could not be built or loaded, once tried


def enabled() -> bool:
    """Whether native loops may run: not turned off by `TINYKG_KERNELS_NATIVE=0` (read per call, or
    once for an `environment.read_once` block)."""
    return _switched_on(environment.get(NATIVE_ENV, "1"))


@functools.lru_cache(maxsize=16)
def _switched_on(value: str) -> bool:
    """`TINYKG_KERNELS_NATIVE`'s value read as on/off (each string once: every codec call asks)."""
    return value.strip().lower() not in ("0", "false", "no", "off")


def failure() -> str | None:
    """Why the native library is unavailable in this process (None: loaded, or not tried yet)."""
    return _failure


def _compiler() -> str | None:
    for candidate in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def _cpu_signature() -> str:
    """What `-march=native` depends on: the CPU model and feature flags (Linux), else the arch."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    wanted = ("model name", "flags", "Features")
    lines = [line for line in text.splitlines() if line.split(":")[0].strip() in wanted]
    return platform.machine() + "\n" + "\n".join(sorted(set(lines)))


def _cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tinykg_kernels"


def _build(compiler: str) -> Path:
    """The library for this source, compiler and CPU: built unless the cache holds it."""
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, check=True
    ).stdout
    key = hashlib.sha256(
        b"\0".join(
            part.encode()
            for part in (
                *(source.read_text() for source in (*SOURCES, *HEADERS)),
                compiler,
                version,
                " ".join(FLAGS),
                _cpu_signature(),
            )
        )
    ).hexdigest()[:24]
    directory = _cache_dir()
    library = directory / f"native-{key}.so"
    if library.exists():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(suffix=".so", dir=directory)
    os.close(handle)
    try:
        subprocess.run(
            [compiler, *FLAGS, *map(str, SOURCES), "-o", partial],
            capture_output=True,
            text=True,
            check=True,
        )
        os.replace(partial, library)  # atomic: a concurrent build writes the same bytes
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return library


_P, _I64, _I32, _INT, _F32 = (
    ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_int, ctypes.c_float,
)  # fmt: skip
# the library's functions: (argument types, return type), as the sources declare them
SIGNATURES = {
    "tinykg_quantize_bf16": ([_P, _I64, _I64, _INT, _P, _INT, _I32, _I32, _P, _P, _P, _P], _INT),
    "tinykg_dequantize_bf16": ([_P, _P, _P, _I64, _I64, _INT, _P, _P], _INT),
    "tinykg_live_rows": ([_P, _I64, _I64, _P], _I64),
    "tinykg_leaky_pair": ([_P, _P, _I64, _F32, _P, _P, _P], None),
    "tinykg_leaky_pair_backward": ([_P, _P, _P, _I64, _F32, _P, _P], None),
    "tinykg_leaky_pair_backward_range": ([_P, _P, _P, _I64, _I64, _I64, _F32, _P, _P], None),
    "tinykg_dropout_apply": ([_P, _P, _I64, _F32, _P, _P], None),
    "tinykg_dropout_backward": ([_P, _P, _I64, _F32, _P], None),
    "tinykg_csr_matmul_i32": ([_P, _P, _P, _P, _I64, _I64, _P], None),
    "tinykg_csr_matmul_i64": ([_P, _P, _P, _P, _I64, _I64, _P], None),
    "tinykg_csr_transposed_add_i32": ([_P, _P, _P, _P, _I64, _I64, _P], None),
    "tinykg_csr_transposed_add_i64": ([_P, _P, _P, _P, _I64, _I64, _P], None),
}


@functools.cache
def load() -> ctypes.CDLL | None:
    """The loaded library, or None (recorded in `failure()`; a failed build also warns once: the
    inductor loops then run, slower)."""
    global _failure
    compiler = _compiler()
    if compiler is None:  # inductor needs one too: its own fallback warns
        _failure = "no C++ compiler found (set CXX, or install g++)"
        return None
    try:
        library = ctypes.CDLL(str(_build(compiler)))
    except subprocess.CalledProcessError as exc:
        first_line = next(iter((exc.stderr or "").strip().splitlines()), "no output")
        _failure = f"{compiler} failed on tinykg_kernels/native: {first_line}"
    except OSError as exc:
        _failure = f"{type(exc).__name__}: {exc}"
    else:
        for name, (arguments, result) in SIGNATURES.items():
            function = getattr(library, name)
            function.argtypes, function.restype = arguments, result
        return library
    warnings.warn(
        f"tinykg_kernels: the native CPU loops are off in this process ({_failure}); the "
        "cpu-inductor loops run instead, with the same results (TINYKG_KERNELS_NATIVE=0 silences this)",
        RuntimeWarning,
        stacklevel=2,
    )
    return None


def available() -> bool:
    """Whether the native loops can run in this process (enabled, and the library loaded)."""
    return enabled() and load() is not None


def status() -> str:
    """The library's state in this process, for a run's record: `loaded`, `not loaded` (no call
    needed it yet), `off (TINYKG_KERNELS_NATIVE=0)`, or `unavailable: <why>`."""
    if not enabled():
        return f"off ({NATIVE_ENV}=0)"
    if load.cache_info().currsize == 0:
        return "not loaded"
    return "loaded" if load() is not None else f"unavailable: {_failure}"
