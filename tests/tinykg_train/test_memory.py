"""Peak process memory and the CUDA allocator peak."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tinykg_train.memory import allocation_peak, cuda_peak_bytes, reset_cuda_peak


def test_peak_rss_covers_a_large_allocation():
    """In a fresh process: in a long test session the allocator may hand back pages that are
    already resident, and the peak would not move."""
    code = (
        "import numpy as np, psutil\n"
        "from tinykg_train.memory import peak_rss_bytes\n"
        "before = psutil.Process().memory_info().rss\n"
        "block = np.ones(256 * 2**20 // 8)  # 256 MiB, every page touched\n"
        "print(peak_rss_bytes() >= before + 0.9 * block.nbytes)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"


def test_cuda_peak_is_none_off_cuda():
    reset_cuda_peak(torch.device("cpu"))
    assert cuda_peak_bytes(torch.device("cpu")) is None


@pytest.mark.cuda
def test_cuda_peak_counts_an_allocation():
    device = torch.device("cuda")
    reset_cuda_peak(device)
    block = torch.empty(2**20, device=device)
    assert cuda_peak_bytes(device) >= block.numel() * 4


MB4 = 1_000_000 * 4  # bytes of a million float32


class _ThreeTemporaries(torch.autograd.Function):
    """Holds three temporaries at once inside one op, freed only when the op returns."""

    @staticmethod
    def forward(ctx, x):
        a, b, c = x * 2, x * 3, x * 4
        return a + b + c  # one more temporary (a + b) and the result

    @staticmethod
    def backward(ctx, grad):
        return grad


def test_allocation_peak_sees_temporaries_an_op_frees_only_when_it_returns():
    x = torch.ones(1_000_000)
    with allocation_peak(torch.device("cpu")) as window:
        out = _ThreeTemporaries.apply(x)
    assert 5 * MB4 <= window.peak_bytes <= 5 * MB4 + 4096  # a, b, c, a + b and the result
    assert MB4 <= window.end_bytes <= MB4 + 4096  # the result is still held
    del out


def test_allocation_peak_of_a_block_that_keeps_nothing_ends_at_zero():
    with allocation_peak(torch.device("cpu")) as window:
        block = torch.ones(2_000_000)
        del block
    assert 2 * MB4 <= window.peak_bytes <= 2 * MB4 + 4096
    assert window.end_bytes == 0
