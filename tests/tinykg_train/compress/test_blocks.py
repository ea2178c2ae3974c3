"""compress.blocks.device_budget: the default block budget, grown on CUDA to at most
CUDA_MAX_BLOCKS blocks of at least CUDA_MIN_BLOCK_BYTES; a given budget kept everywhere."""

from __future__ import annotations

import torch

from tinykg_train.compress.blocks import (
    BLOCK_BYTES,
    CUDA_MAX_BLOCKS,
    CUDA_MIN_BLOCK_BYTES,
    MIN_MATMUL_ROWS,
    budgets_as_on,
    device_budget,
    spans,
)

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_on_the_cpu_the_default_budget_stays_whatever_the_graph():
    assert device_budget(None, CPU, 100 * BLOCK_BYTES) == BLOCK_BYTES


def test_on_cuda_a_large_graph_takes_at_most_the_cap_of_blocks():
    rows, row_bytes = 1_250_000, 3 * (64 + 64) * 4  # KGAT's first layer on the 10M-triple graph
    budget = device_budget(None, CUDA, rows * row_bytes)
    assert budget > BLOCK_BYTES
    assert len(list(spans(rows, row_bytes, budget, MIN_MATMUL_ROWS))) == CUDA_MAX_BLOCKS
    assert len(list(spans(rows, row_bytes, BLOCK_BYTES, MIN_MATMUL_ROWS))) > 50  # before


def test_on_cuda_a_small_graph_takes_one_block_and_a_given_budget_is_kept():
    # lfm1m's 33k nodes, KGAT's first layer: two blocks of the CPU's budget, one on a GPU
    total = 33_521 * 3 * (64 + 32) * 4
    assert len(list(spans(33_521, total // 33_521, BLOCK_BYTES, MIN_MATMUL_ROWS))) == 2
    assert device_budget(None, CUDA, total) == CUDA_MIN_BLOCK_BYTES > total
    assert device_budget(None, CUDA, 3 * BLOCK_BYTES) == CUDA_MIN_BLOCK_BYTES
    assert device_budget(1 << 20, CUDA, 100 * BLOCK_BYTES) == 1 << 20


def test_budgets_as_on_cuda_size_cpu_blocks_as_a_gpu_would_inside_the_block_only():
    total = 100 * BLOCK_BYTES
    with budgets_as_on("cuda"):
        assert device_budget(None, CPU, total) == device_budget(None, CUDA, total) > BLOCK_BYTES
        assert device_budget(1 << 20, CPU, total) == 1 << 20  # a given budget is kept
    assert device_budget(None, CPU, total) == BLOCK_BYTES
