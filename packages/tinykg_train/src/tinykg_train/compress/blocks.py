"""Blocks of rows (or edges): whole-graph work done a bounded number of bytes at a time.

A layer over the whole graph builds several [nodes, dim] (or [edges, dim]) temporaries; done one
block of rows at a time, each temporary is a block's worth, and the step's peak falls by the
difference. The numbers stay the same bits, for two reasons the ops that use blocks rely on:
- row-wise work (elementwise ops, a row's sparse product, a row of a matrix product with at least
  `MIN_MATMUL_ROWS` rows) gives each row the same bits whatever block it is computed in
  (tests/tinykg_train/compress/test_blocks.py checks the matrix product on this machine's BLAS);
- a sum over rows (a weight gradient) is never cut: an `index_add_` cut into consecutive blocks
  adds into each output row in the same order as one call (on the CPU; CUDA's atomics have no order
  to keep), and matrix products that sum over rows are taken whole.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

#: Default bound on the temporaries of one block, in bytes.
BLOCK_BYTES = 32 << 20
#: The fewest rows a block of a matrix product is cut to: much smaller products may take another
#: BLAS path that rounds differently.
MIN_MATMUL_ROWS = 128
#: On a GPU every block costs a few dozen kernel launches whatever its size, and the host issuing
#: them bounds a blocked step (a KGAT INT2 CF step on a 10M-triple graph cut into 123 blocks of
#: `BLOCK_BYTES`: 169 ms against FP32's 32 on an H200; docs/compression.md). There the default
#: budget grows so that whole-graph work takes at most this many blocks.
CUDA_MAX_BLOCKS = 8
#: And a block there is never smaller than this: a graph whose whole-graph temporaries take a few
#: times `BLOCK_BYTES` (lfm1m's 33k nodes: two blocks of a KGAT layer's backward) paid each extra
#: block's few dozen launches, and its neighbor rows rebuilt, to save 32 MiB a GPU does not miss
#: (docs/compression.md, *Where the time goes on a GPU*).
CUDA_MIN_BLOCK_BYTES = 128 << 20


def block_budget(block_bytes: int | None) -> int:
    """Bytes a block's temporaries may take: `block_bytes`, or `BLOCK_BYTES` when None."""
    return BLOCK_BYTES if block_bytes is None else block_bytes


_budget_device: str | None = None  # `budgets_as_on`'s device type, else None


@contextlib.contextmanager
def budgets_as_on(device_type: str) -> Iterator[None]:
    """Inside the block, `device_budget` sizes blocks as on `device_type` whatever the tensors'
    device: a CPU run then cuts whole-graph work as a GPU would (`benchmarks.peak_by_node`)."""
    global _budget_device
    before, _budget_device = _budget_device, device_type
    try:
        yield
    finally:
        _budget_device = before


def device_budget(block_bytes: int | None, device: torch.device, total_bytes: int) -> int:
    """`block_budget(block_bytes)`, except that on CUDA the default (`block_bytes` None) is
    `total_bytes / CUDA_MAX_BLOCKS`, but at least `CUDA_MIN_BLOCK_BYTES`: at most
    `CUDA_MAX_BLOCKS` blocks there, and none below that size. A given `block_bytes` is kept on
    every device."""
    budget = block_budget(block_bytes)
    if block_bytes is not None or (_budget_device or device.type) != "cuda":
        return budget
    return max(CUDA_MIN_BLOCK_BYTES, -(-total_bytes // CUDA_MAX_BLOCKS))


def spans(
    count: int, row_bytes: int, block_bytes: int | None = None, minimum: int = 1
) -> Iterator[tuple[int, int]]:
    """`(start, stop)` of consecutive near-equal blocks covering `range(count)`, each holding at
    most `block_bytes` (default `BLOCK_BYTES`) of `row_bytes` per row, but at least `minimum` rows
    (unless `count` is smaller)."""
    fit = max(block_budget(block_bytes) // max(row_bytes, 1), minimum, 1)
    blocks = max(-(-count // fit), 1)
    if blocks > 1 and count < blocks * minimum:
        blocks = max(count // minimum, 1)
    base, extra = divmod(count, blocks)
    start = 0
    for block in range(blocks):
        stop = start + base + (1 if block < extra else 0)
        if stop > start:
            yield start, stop
        start = stop
