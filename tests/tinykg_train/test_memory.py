"""Peak process memory and the CUDA allocator peak."""

from __future__ import annotations

import numpy as np
import psutil
import pytest
import torch

from tinykg_train.memory import cuda_peak_bytes, peak_rss_bytes, reset_cuda_peak


def test_peak_rss_covers_a_large_allocation():
    resident_before = psutil.Process().memory_info().rss
    block = np.ones(256 * 2**20 // 8)  # 256 MiB, every page touched
    assert peak_rss_bytes() >= resident_before + 0.9 * block.nbytes


def test_cuda_peak_is_none_off_cuda():
    reset_cuda_peak(torch.device("cpu"))
    assert cuda_peak_bytes(torch.device("cpu")) is None


@pytest.mark.cuda
def test_cuda_peak_counts_an_allocation():
    device = torch.device("cuda")
    reset_cuda_peak(device)
    block = torch.empty(2**20, device=device)
    assert cuda_peak_bytes(device) >= block.numel() * 4
