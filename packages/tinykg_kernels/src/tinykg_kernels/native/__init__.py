"""Float32 CPU loops as native code, built on first use and loaded with ctypes: the codec
(`codec.cpp`) and a CSR sparse-dense product (`spmm.cpp`).

Inductor's fused quantize loop (`compiled_ops`) pays for its generality: vector-mask selects and a
scalar packing loop make it about 3x slower than the same IEEE steps written as plain loops, and
torch's CSR product on the CPU about 2x slower than one that keeps each output row in registers.
This module compiles both sources once per machine (the C++ compiler inductor needs anyway: `$CXX`,
else g++, c++ or clang++; -O3 -march=native -ffp-contract=off, a few seconds), caches the library
under `$TINYKG_KERNELS_CACHE` (default `~/.cache/tinykg_kernels`), keyed by the sources, compiler,
flags and CPU, and calls it on torch tensors' memory.

- The codec equals `reference.quantize` with `counter_noise` and `reference.dequantize` bit for bit,
  as the compiled path's does (tested), so the two are interchangeable: `compiled_ops` calls it
  where it applies (float32 values, bfloat16 parameters, whole groups) and its inductor loops
  elsewhere or when no library could be built.
- `csr_matmul` sums each row's entries in order (deterministic); it equals the dense product to
  float32 rounding, not torch's CSR product bit for bit.

`TINYKG_KERNELS_NATIVE=0` turns it off (the inductor loops and torch's CSR product then run).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

NATIVE_ENV = "TINYKG_KERNELS_NATIVE"
CACHE_ENV = "TINYKG_KERNELS_CACHE"
SOURCES = tuple(Path(__file__).with_name(name) for name in ("codec.cpp", "spmm.cpp", "planes.cpp"))
HEADERS = (Path(__file__).with_name("vectors.h"),)  # included by the sources
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-std=c++17", "-shared", "-fPIC")

# with more than one torch thread, products of at least this many rows run in that many slices
PARALLEL_MIN_ROWS = 4096

_failure: str | None = None  # why the library could not be built or loaded, once tried


def enabled() -> bool:
    """Whether native loops may run: not turned off by `TINYKG_KERNELS_NATIVE=0`."""
    return os.environ.get(NATIVE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


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


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The loaded library, or None (recorded in `failure()`)."""
    global _failure
    compiler = _compiler()
    if compiler is None:
        _failure = "no C++ compiler found (set CXX, or install g++)"
        return None
    try:
        library = ctypes.CDLL(str(_build(compiler)))
    except subprocess.CalledProcessError as exc:
        _failure = f"{compiler} failed: {(exc.stderr or '').strip().splitlines()[:1]}"
        return None
    except OSError as exc:
        _failure = f"{type(exc).__name__}: {exc}"
        return None
    pointer, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    library.tinykg_quantize_bf16.argtypes = [
        pointer, i64, i64, ctypes.c_int, pointer, ctypes.c_int, i32, i32,
        pointer, pointer, pointer, pointer,
    ]  # fmt: skip
    library.tinykg_quantize_bf16.restype = ctypes.c_int
    library.tinykg_dequantize_bf16.argtypes = [pointer, pointer, pointer, i64, i64, ctypes.c_int,
                                               pointer, pointer]  # fmt: skip
    library.tinykg_dequantize_bf16.restype = ctypes.c_int
    f32 = ctypes.c_float
    library.tinykg_leaky_pair.argtypes = [pointer, pointer, i64, f32, pointer, pointer, pointer]
    library.tinykg_leaky_pair_backward.argtypes = [pointer, pointer, pointer, i64, f32, pointer,
                                                   pointer]  # fmt: skip
    library.tinykg_dropout_apply.argtypes = [pointer, pointer, i64, f32, pointer, pointer]
    library.tinykg_dropout_backward.argtypes = [pointer, pointer, i64, f32, pointer]
    for name in ("tinykg_leaky_pair", "tinykg_leaky_pair_backward", "tinykg_dropout_apply",
                 "tinykg_dropout_backward"):  # fmt: skip
        getattr(library, name).restype = None
    for name in ("tinykg_csr_matmul_i32", "tinykg_csr_matmul_i64"):
        getattr(library, name).argtypes = [pointer, pointer, pointer, pointer, i64, i64, pointer]
        getattr(library, name).restype = None
    return library


def available() -> bool:
    """Whether the native loops can run in this process (enabled, and the library loaded)."""
    return enabled() and _library() is not None


def applies(dtype: torch.dtype, param_dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a call with these dtypes on this device runs natively: float32 values on the CPU
    with bfloat16 parameters (the default for float32 activations)."""
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and param_dtype == torch.bfloat16
        and available()
    )


@functools.cache
def _table(values: tuple[float, ...]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def quantize_groups(
    x: torch.Tensor,
    bits: int,
    normal: tuple[tuple[float, ...], tuple[float, ...]] | None,
    keys: tuple[int, int] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Contiguous float32 `[groups, group_len]` -> (packed codes, bfloat16 scale, bfloat16 zero, bad
    flags); `normal`: the normal scheme's (levels, inverse widths), or None for uniform; `keys`: the
    counter noise's two int32 keys, or None to round to nearest."""
    n_groups, group_len = x.shape
    packed = torch.empty((n_groups, group_len * bits // 8), dtype=torch.uint8)
    scale = torch.empty(n_groups, dtype=torch.bfloat16)
    zero = torch.empty(n_groups, dtype=torch.bfloat16)
    bad = torch.empty(n_groups, dtype=torch.bool)
    table = None if normal is None else _table(normal[0] + normal[1])
    k0, k1 = keys if keys is not None else (0, 0)
    status = _library().tinykg_quantize_bf16(
        x.data_ptr(), n_groups, group_len, bits,
        None if table is None else table.data_ptr(), keys is not None, k0, k1,
        packed.data_ptr(), zero.data_ptr(), scale.data_ptr(), bad.data_ptr(),
    )  # fmt: skip
    if status != 0:
        raise ValueError(
            f"native quantize: unsupported width {bits} (scheme normal: {normal is not None})"
        )
    return packed, scale, zero, bad


def dequantize_groups(
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    group_len: int,
    bits: int,
    normal_levels: tuple[float, ...] | None,
) -> torch.Tensor:
    """Packed codes of full groups and their bfloat16 parameters -> float32 `[groups, group_len]`."""
    n_groups = packed.shape[0]
    out = torch.empty((n_groups, group_len), dtype=torch.float32)
    table = None if normal_levels is None else _table(normal_levels)
    status = _library().tinykg_dequantize_bf16(
        packed.data_ptr(), zero.data_ptr(), scale.data_ptr(), n_groups, group_len, bits,
        None if table is None else table.data_ptr(), out.data_ptr(),
    )  # fmt: skip
    if status != 0:
        raise ValueError(f"native dequantize: unsupported width {bits}")
    return out


def planes_apply(x: torch.Tensor) -> bool:
    """Whether the plane-mask passes (`leaky_pair`, `dropout_*`) run natively on `x`: a float32
    CPU tensor of whole planes (a multiple of 8 elements), and the library available."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.numel() % 8 == 0
        and x.numel() > 0
        and available()
    )


def _mask_for(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.numel() // 8, dtype=torch.uint8)


def leaky_pair(
    a: torch.Tensor, b: torch.Tensor, slope: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`tinykg_kernels.leaky_relu_pair` for tensors `planes_apply` accepts (same shape)."""
    a, b = a.contiguous(), b.contiguous()
    out, mask_a, mask_b = torch.empty_like(a), _mask_for(a), _mask_for(a)
    _library().tinykg_leaky_pair(
        a.data_ptr(), b.data_ptr(), a.numel(), slope, out.data_ptr(), mask_a.data_ptr(),
        mask_b.data_ptr(),
    )  # fmt: skip
    return out, mask_a, mask_b


def leaky_pair_backward(
    grad: torch.Tensor, mask_a: torch.Tensor, mask_b: torch.Tensor, slope: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`tinykg_kernels.leaky_relu_pair_backward` for a gradient `planes_apply` accepts."""
    grad = grad.contiguous()
    grad_a, grad_b = torch.empty_like(grad), torch.empty_like(grad)
    _library().tinykg_leaky_pair_backward(
        grad.data_ptr(), mask_a.contiguous().data_ptr(), mask_b.contiguous().data_ptr(),
        grad.numel(), slope, grad_a.data_ptr(), grad_b.data_ptr(),
    )  # fmt: skip
    return grad_a, grad_b


def dropout_apply(
    x: torch.Tensor, noise: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`tinykg_kernels.apply_dropout_noise` for tensors `planes_apply` accepts (same shape)."""
    x, noise = x.contiguous(), noise.contiguous()
    out, kept = torch.empty_like(x), _mask_for(x)
    _library().tinykg_dropout_apply(
        x.data_ptr(), noise.data_ptr(), x.numel(), scale, out.data_ptr(), kept.data_ptr()
    )
    return out, kept


def dropout_backward(grad: torch.Tensor, kept: torch.Tensor, kept_value: float) -> torch.Tensor:
    """`tinykg_kernels.dropout_noise_backward` for a gradient `planes_apply` accepts."""
    grad = grad.contiguous()
    out = torch.empty_like(grad)
    _library().tinykg_dropout_backward(
        grad.data_ptr(), kept.contiguous().data_ptr(), grad.numel(), kept_value, out.data_ptr()
    )
    return out


def csr_applies(
    crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, x: torch.Tensor
) -> bool:
    """Whether `csr_matmul` runs natively for these tensors: float32 values and x on the CPU, int32
    or int64 indices of one dtype, and the library available."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and values.dtype == torch.float32
        and x.dim() == 2
        and crow.dtype == col.dtype
        and crow.dtype in (torch.int32, torch.int64)
        and available()
    )


def csr_matmul(
    crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, x: torch.Tensor
) -> torch.Tensor:
    """`A @ x` for A in CSR (`crow` row pointers, `col` columns, `values`), x `[columns, width]`
    (see `csr_applies`): float32 `[len(crow) - 1, width]`. The entries' columns are not checked
    against x's rows (a whole pass): build them with a CSR constructor, as `CSRGraph` does."""
    n_rows, width = crow.numel() - 1, x.shape[1]
    if values.numel() != col.numel() or n_rows < 0:
        raise ValueError(
            f"csr_matmul needs one value per column index and at least one row pointer (got "
            f"{values.numel()} values, {col.numel()} columns, {crow.numel()} row pointers)"
        )
    x, values = x.contiguous(), values.contiguous()
    crow, col = crow.contiguous(), col.contiguous()
    out = torch.empty((n_rows, width), dtype=torch.float32)
    kernel = (
        _library().tinykg_csr_matmul_i32
        if crow.dtype == torch.int32
        else _library().tinykg_csr_matmul_i64
    )

    def rows(start: int, stop: int) -> None:  # ctypes releases the GIL while the loop runs
        kernel(
            crow.data_ptr() + start * crow.element_size(), col.data_ptr(), values.data_ptr(),
            x.data_ptr(), stop - start, width, out.data_ptr() + start * width * 4,
        )  # fmt: skip

    threads = torch.get_num_threads()
    if threads == 1 or n_rows < PARALLEL_MIN_ROWS:
        rows(0, n_rows)
        return out
    # as many slices of rows as torch has threads, cut where they hold equal numbers of entries;
    # this thread runs the first, a pool the others
    targets = torch.linspace(0, int(crow[-1]), threads + 1)[1:-1].to(crow.dtype)
    cuts = [0, *torch.searchsorted(crow, targets).tolist(), n_rows]
    slices = list(zip(cuts[:-1], cuts[1:], strict=True))
    pending = [_pool(os.getpid(), threads - 1).submit(rows, *piece) for piece in slices[1:]]
    rows(*slices[0])
    for future in pending:
        future.result()
    return out


@functools.cache
def _pool(pid: int, workers: int) -> ThreadPoolExecutor:
    """Threads for `csr_matmul`'s slices, per process (`pid`: a forked child makes its own)."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tinykg-csr")
