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


@functools.cache
def _pool(pid: int, workers: int) -> ThreadPoolExecutor:
    """Threads for `csr_matmul`'s slices, per process (`pid`: a forked child makes its own)."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tinykg-csr")
