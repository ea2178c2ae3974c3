"""Peak memory of the training process: resident set size and, on CUDA, the allocator's peak; and
`allocation_peak`, the bytes a block of code allocates at once (a step, an evaluation).

`allocation_peak` on CUDA is `max_memory_allocated` since the block began, less what was allocated
when it began. On the CPU it walks every allocation and free torch's allocator reported to
`torch.profiler(profile_memory=True)` during the block, in time order, and keeps the highest running
sum: exact for tensors, blind to memory outside torch (NumPy arrays, the interpreter, malloc's free
lists). The profiler cannot see the free of a block allocated before it started (its size is
unknown to it), so open the window after such frees (a step's window opens after `zero_grad`).
The profiler runs without Kineto (`use_kineto=False`): the allocation events are the same, and a
process that measures once does not carry Kineto's ~150 MB of buffers and libraries.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
from collections.abc import Iterator
from dataclasses import dataclass

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


@dataclass
class AllocationWindow:
    """What `allocation_peak` measured: `peak_bytes`, the most allocated at once beyond what was
    allocated when the block began; `end_bytes`, what the block left allocated (both can be
    negative on CUDA, where frees of older blocks count); on CUDA also `start_bytes`
    (`memory_allocated` when it began) and `earlier_peak_bytes`, the `max_memory_allocated` that the
    window's reset replaced (a run's own peak is the larger of the two)."""

    device: torch.device
    peak_bytes: int = 0
    end_bytes: int = 0
    start_bytes: int | None = None
    earlier_peak_bytes: int | None = None


@contextlib.contextmanager
def allocation_peak(device: torch.device) -> Iterator[AllocationWindow]:
    """`with allocation_peak(device) as window: ...`, then `window.peak_bytes` (see the module)."""
    window = AllocationWindow(torch.device(device))
    if window.device.type == "cuda":
        torch.cuda.synchronize(window.device)
        window.earlier_peak_bytes = int(torch.cuda.max_memory_allocated(window.device))
        window.start_bytes = int(torch.cuda.memory_allocated(window.device))
        torch.cuda.reset_peak_memory_stats(window.device)
        yield window
        torch.cuda.synchronize(window.device)
        window.peak_bytes = int(torch.cuda.max_memory_allocated(window.device)) - window.start_bytes
        window.end_bytes = int(torch.cuda.memory_allocated(window.device)) - window.start_bytes
        return
    from torch.autograd.profiler import profile

    # without Kineto: its first use costs a process ~150 MB of resident memory, this ~10 MB
    with _quiet_stderr(), profile(profile_memory=True, use_kineto=False) as prof:
        yield window
    window.peak_bytes, window.end_bytes = _walk_allocations(prof, window.device)


def _walk_allocations(prof, device: torch.device) -> tuple[int, int]:
    """(highest running sum, final sum) of the profiled allocations on `device`, in time order."""
    from torch._C._profiler import _EventType

    sizes: list[tuple[int, int]] = []
    pending = list(reversed(prof.kineto_results.experimental_event_tree()))
    while pending:  # depth first, in order: ties in time keep the order they happened in
        event = pending.pop()
        pending.extend(reversed(event.children))
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == device.type:
            sizes.append((event.start_time_ns, event.extra_fields.alloc_size))
    live = peak = 0
    for _, size in sorted(sizes, key=lambda item: item[0]):
        live += size
        peak = max(peak, live)
    return int(peak), int(live)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for a while: the profiler's C++ side prints a start and a stop
    line there for every profiled block (and a warning per free of a block older than the block)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
