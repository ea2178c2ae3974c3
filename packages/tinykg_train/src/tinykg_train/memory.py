"""Peak memory of the training process: resident set size and, on CUDA, the allocator's peak."""

from __future__ import annotations

import resource
import sys

import torch


def peak_rss_bytes() -> int:
    """The highest resident set size this process has reached so far, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # Linux reports KiB


def reset_cuda_peak(device: torch.device) -> None:
    """Start a fresh `max_memory_allocated` window (no-op off CUDA)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def cuda_peak_bytes(device: torch.device) -> int | None:
    """`torch.cuda.max_memory_allocated` since the last reset, or None off CUDA."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.max_memory_allocated(device))
