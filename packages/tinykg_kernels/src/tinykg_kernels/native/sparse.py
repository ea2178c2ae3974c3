"""The CSR product's call into the native library (`spmm.cpp`), sliced over torch's threads."""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import torch

from tinykg_kernels.native import library

# with more than one torch thread, products of at least this many rows run in that many slices
PARALLEL_MIN_ROWS = 4096


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
        and library.available()
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
        library.load().tinykg_csr_matmul_i32
        if crow.dtype == torch.int32
        else library.load().tinykg_csr_matmul_i64
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


def csr_transposed_add(
    crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, x: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    """`out += A[rows]^T @ x` in place, for a block of A's rows in CSR: `crow` the block's row
    pointers into the whole `col` and `values` (`len(crow) - 1` rows), x `[rows, width]`, out
    `[columns, width]`, float32 and contiguous (see `csr_applies`). Entries are added in order on
    one core (rows of the block may share a column: no threads), so a zeroed `out` given every row
    in order gets the transposed CSR product's bits."""
    n_rows, width = crow.numel() - 1, x.shape[1]
    if x.shape[0] != n_rows or out.dim() != 2 or out.shape[1] != width:
        raise ValueError(
            f"csr_transposed_add needs x [{n_rows}, width] and out [columns, width] of one width "
            f"(got x {tuple(x.shape)}, out {tuple(out.shape)})"
        )
    if not (out.is_contiguous() and out.dtype == torch.float32 and out.device.type == "cpu"):
        raise ValueError("csr_transposed_add writes into a contiguous float32 CPU 'out'")
    x, values, crow, col = x.contiguous(), values.contiguous(), crow.contiguous(), col.contiguous()
    kernel = (
        library.load().tinykg_csr_transposed_add_i32
        if crow.dtype == torch.int32
        else library.load().tinykg_csr_transposed_add_i64
    )
    kernel(
        crow.data_ptr(), col.data_ptr(), values.data_ptr(), x.data_ptr(), n_rows, width,
        out.data_ptr(),
    )  # fmt: skip
    return out


@functools.cache
def _pool(pid: int, workers: int) -> ThreadPoolExecutor:
    """Threads for `csr_matmul`'s slices, per process (`pid`: a forked child makes its own)."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tinykg-csr")
