"""The `cpu-native` backend: float32 CPU loops as native code, built on first use and loaded with
ctypes (`library`): the codec (`codec.cpp`, called from `codec`), the plane-mask passes of the
LeakyReLU pair and dropout (`planes.cpp`, `plane_passes`) and a CSR sparse-dense product
(`spmm.cpp`, `sparse`).

Inductor's fused quantize loop (`cpu_ops`, backend `cpu-inductor`) pays for its generality
(vector-mask selects, a scalar packing loop): the same IEEE steps as plain loops quantize 2.4x
faster at INT2, and a CSR product that keeps each output row in registers runs 2.3x torch's on one
core
(`benchmarks.bench_kernels`, section kernels-cpu).
This package compiles the sources once per machine (the C++ compiler inductor needs anyway: `$CXX`,
else g++, c++ or clang++; -O3 -march=native -ffp-contract=off, a few seconds), caches the library
under `$TINYKG_KERNELS_CACHE` (default `~/.cache/tinykg_kernels`), keyed by the sources, compiler,
flags and CPU, and calls it on torch tensors' memory.

- `live_rows` (in `codec.cpp`): which rows of a float32 tensor hold a nonzero value, one pass.
- The codec equals `reference.quantize` with `counter_noise` and `reference.dequantize` bit for bit,
  as inductor's loops do (tested), so the two are interchangeable: `cpu_ops` calls it where it
  applies (float32 values, bfloat16 parameters, whole groups) and inductor's loops elsewhere.
- `csr_matmul` sums each row's entries in order (deterministic); it equals the dense product to
  float32 rounding, not torch's CSR product bit for bit. `csr_transposed_add` adds a block of
  rows' transposed product into a dense matrix, in order (a zeroed matrix given every block in
  order holds the transposed matrix's `csr_matmul`, bit for bit).

`TINYKG_KERNELS_NATIVE=0` turns it off (under `auto`, inductor's loops and torch's CSR product then
run); `status()` says whether the library is loaded, for a run's record.
"""

from tinykg_kernels.native.codec import (
    codec_applies,
    dequantize_groups,
    live_rows,
    quantize_groups,
)
from tinykg_kernels.native.library import (
    CACHE_ENV,
    HEADERS,
    NATIVE_ENV,
    SOURCES,
    available,
    enabled,
    failure,
    status,
)
from tinykg_kernels.native.plane_passes import (
    dropout_apply,
    dropout_backward,
    leaky_pair,
    leaky_pair_backward,
    leaky_pair_backward_range,
    planes_applies,
)
from tinykg_kernels.native.sparse import (
    PARALLEL_MIN_ROWS,
    csr_applies,
    csr_matmul,
    csr_transposed_add,
)

__all__ = [
    "CACHE_ENV",
    "HEADERS",
    "NATIVE_ENV",
    "PARALLEL_MIN_ROWS",
    "SOURCES",
    "codec_applies",
    "available",
    "csr_applies",
    "csr_matmul",
    "csr_transposed_add",
    "dequantize_groups",
    "dropout_apply",
    "dropout_backward",
    "enabled",
    "failure",
    "leaky_pair",
    "leaky_pair_backward",
    "leaky_pair_backward_range",
    "live_rows",
    "planes_applies",
    "quantize_groups",
    "status",
]
