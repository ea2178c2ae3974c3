"""`csr_matmul`: a CSR sparse matrix times a dense one, `cpu-native` (`native.csr_matmul`) where it
applies and torch's CSR product elsewhere; `csr_transposed_add_`: the transposed product of a block
of its rows added into a dense matrix (`native.csr_transposed_add`, else `index_add_`). `usage`
records which ran.

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


#: Bytes of the `[entries, width]` messages `csr_transposed_add_`'s torch path builds at a time.
TRANSPOSED_CHUNK_BYTES = 32 << 20


def csr_transposed_add_(
    crow: torch.Tensor,
    col: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    out: torch.Tensor,
    backend: str | None = None,
) -> torch.Tensor:
    """`out += A[rows]^T @ x` in place, for a block of rows of A in CSR: `crow` the block's
    `len(x) + 1` row pointers into the whole `col` and `values`, x `[rows, width]`, out
    `[columns, width]`. What a backward needs to push a block of rows' gradient back through
    `A @ x` without the whole gradient: the blocks' sum is `A^T @ grad`. `cpu-native` adds in order
    (deterministic); elsewhere `index_add_` on the block's messages, at most
    `TRANSPOSED_CHUNK_BYTES` of them at a time (CUDA's atomics sum in no fixed order)."""
    chosen = dispatch.select_backend(x.device, backend, dispatch.CPU_LOOPS_MIN_NUMEL)
    native_out = out.is_contiguous() and out.dtype == torch.float32
    if chosen == "cpu-native" and native_out and native.csr_applies(crow, col, values, x):
        usage.record("csr_transposed_add", "cpu-native")
        return native.csr_transposed_add(crow, col, values, x, out)
    usage.record("csr_transposed_add", "torch")
    first, last = int(crow[0]), int(crow[-1])
    counts = (crow[1:] - crow[:-1]).long()
    row_of_entry = torch.repeat_interleave(torch.arange(len(counts), device=x.device), counts)
    chunk = max(TRANSPOSED_CHUNK_BYTES // max(x.shape[1] * x.element_size(), 1), 1)
    for start in range(0, last - first, chunk):
        stop = min(start + chunk, last - first)
        rows = row_of_entry[start:stop]
        weights = values[first + start : first + stop].unsqueeze(1)
        out.index_add_(
            0, col[first + start : first + stop].long(), x.index_select(0, rows) * weights
        )
    return out
