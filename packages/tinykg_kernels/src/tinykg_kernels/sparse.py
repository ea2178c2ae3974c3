"""`csr_matmul`: a CSR sparse matrix times a dense one, `cpu-native` (`native.csr_matmul`) where it
applies and torch's CSR product elsewhere; `usage` records which ran.

The native product keeps each output row in vector registers and sums its entries in order
(deterministic, 1.4x torch's CSR product on one core in `benchmarks.bench_kernels`); it equals the
dense product to float32 rounding, not torch's CSR product bit for bit. Under `auto` it runs for
every float32 CPU product (there is no compile to amortize, so no size threshold); `cpu-inductor`
has no CSR loops and steps down to torch, as does `triton`.
"""

from __future__ import annotations

import warnings

import torch

from tinykg_kernels import dispatch, native, usage


def csr_matmul(
    crow: torch.Tensor,
    col: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    backend: str | None = None,
) -> torch.Tensor:
    """`A @ x` for A in CSR (`crow` row pointers, `col` columns, `values`) with `x.shape[0]`
    columns: `[len(crow) - 1, x.shape[1]]`. The columns are not checked against x's rows (a whole
    pass): build them with a CSR constructor."""
    # any size counts as large: the native product has no compile to amortize
    chosen = dispatch.select_backend(x.device, backend, dispatch.CPU_LOOPS_MIN_NUMEL)
    if chosen == "cpu-native" and native.csr_applies(crow, col, values, x):
        usage.record("csr_matmul", "cpu-native")
        return native.csr_matmul(crow, col, values, x)
    usage.record("csr_matmul", "torch")
    with warnings.catch_warnings():  # "CSR support is in beta state", once per process
        warnings.simplefilter("ignore", UserWarning)
        shape = (crow.numel() - 1, x.shape[0])
        matrix = torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)
    return matrix @ x.contiguous()
