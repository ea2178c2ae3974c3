"""Keep freed CPU memory in the process for reuse, instead of returning it to the OS each step.

glibc's malloc hands allocations above a threshold (128 KiB, raised as such blocks are freed, at most
32 MiB) to `mmap`, returns them on `free`, and trims the heap whenever its free top grows past twice
that threshold. A training step on the CPU allocates and frees the same whole-graph tensors (MiBs
each) every step, so their pages go back to the OS and come back as fresh, zeroed pages the next
step: on music-kgcn, tens of thousands of page faults per epoch. Tuned, in the same rounds, a KGAT
epoch takes 0.82x (FP32) and 0.95x (INT2) of its time with glibc's defaults, KGIN 0.83x and 0.79x
(`python -m benchmarks.bench_epoch_time --allocator both`); the peak RSS of three KGAT epochs
stayed within 1%.

`tune_cpu_allocator` sets the three `mallopt` knobs once per process (the same the MALLOC_*_
environment variables set at start-up): blocks under 32 MiB come from the heap, and up to 1 GiB of
freed heap is kept: what was freed is not handed back until exit.

Kept that way, the heap fragments: blocks freed in one order are asked for again in sizes they do
not fit, and the heap grows past what is live. On the synthetic KGAT graph of 50,000 users, after
three INT2 steps glibc's heap held 2,155 MiB of which 1,671 were free, and the process's peak
RSS was 2.0 GB where torch's tensors peaked at 718 MiB. So the tuned setting also sets torch's
`THP_MEM_ALLOC_ENABLE=1`: CPU tensors of 2 MiB or more are then allocated 2 MiB-aligned and advised
to the kernel as transparent huge pages (used where THP is in `madvise` or `always` mode), which
lowered that peak (`benchmarks.bench_memory --peak`, see BENCHMARKS.md; in scratch step-time
checks the steps were no slower, on the 50k graph and on lfm1m).
torch reads that switch once, at the process's first CPU allocation, so `request_huge_pages` runs
when `tinykg_train` is imported; a process that allocated tensors before goes on without.

Keeping freed heap also keeps what building a run freed (reading the dataset, building the graph
and the model), in pieces a training step's tensors may not fit. `release_freed_memory`
(`malloc_trim`) hands it back once, when the session is built. How much that was depends on the
graph (one scratch measurement each, whole-graph KGAT INT2, 3 steps and the rankings): on the
graph `benchmarks.peak_by_node --dataset synthetic:250000` generates the peak RSS fell from 4,232
to 3,774 MiB; on `bench_scale`'s 10M graph it stayed within run-to-run noise (INT2 4,138 MiB before,
4,183 and 4,154 in two runs after; section `scale-whole-10m-cpu` holds the latest run).

Set `TINYKG_CPU_ALLOCATOR=default` to leave malloc and torch as they are. Off Linux/glibc it does
nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

from tinykg_train.errors import ConfigError

ENV_VAR = "TINYKG_CPU_ALLOCATOR"
#: torch's switch: CPU tensors of 2 MiB or more aligned to and advised as transparent huge pages
HUGE_PAGES_ENV = "THP_MEM_ALLOC_ENABLE"
CHOICES = ("tuned", "default")

# mallopt parameter numbers (glibc's malloc.h) and the values set
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = {
    M_MMAP_THRESHOLD: 32 << 20,  # the largest glibc accepts on 64-bit
    M_TRIM_THRESHOLD: 1 << 30,
    M_TOP_PAD: 64 << 20,  # grow the heap in steps of 64 MiB, not one block at a time
}
#: the largest parameter from which a run releases its free heap between phases
PHASE_RELEASE_MIN_TABLE = 64 << 20
#: and, on such a graph, blocks of 2 MiB and more (torch's huge-page size) are mapped apart and
#: handed back on free, and the heap's free top is trimmed past 64 MiB
LARGE_GRAPH_SETTINGS = {M_MMAP_THRESHOLD: 2 << 20, M_TRIM_THRESHOLD: 64 << 20}


def requested() -> str:
    """`tuned` unless TINYKG_CPU_ALLOCATOR says `default`; a one-line error for anything else."""
    value = os.environ.get(ENV_VAR, "tuned").strip().lower() or "tuned"
    if value not in CHOICES:
        raise ConfigError(
            f"{ENV_VAR} must be one of {', '.join(CHOICES)} (got {value!r}); unset it for the tuned "
            "CPU allocator"
        )
    return value


@functools.cache
def _glibc_mallopt():
    """glibc's `mallopt`, or None (macOS, Windows, musl)."""
    if not hasattr(os, "confstr"):
        return None
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
    except (ValueError, OSError):
        return None
    mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: glibc's, no library search
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


def _apply(settings: dict[int, int]) -> bool:
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    return all(mallopt(parameter, value) == 1 for parameter, value in settings.items())


def request_huge_pages() -> bool:
    """Set torch's `THP_MEM_ALLOC_ENABLE=1` unless TINYKG_CPU_ALLOCATOR asks for something other
    than `tuned` or the variable is already set (a user's own choice wins); True when it is now 1.
    Never raises: it runs at import, and a bad TINYKG_CPU_ALLOCATOR is reported where the trainer
    tunes the allocator."""
    try:
        tuned = requested() == "tuned"
    except ConfigError:
        return False
    if not (tuned and sys.platform.startswith("linux")):
        return False
    return os.environ.setdefault(HUGE_PAGES_ENV, "1") == "1"


@functools.cache
def _glibc_malloc_trim():
    """glibc's `malloc_trim`, or None where `mallopt` is not glibc's."""
    if _glibc_mallopt() is None:
        return None
    trim = ctypes.CDLL(None).malloc_trim
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_memory() -> bool:
    """Return the heap's free memory to the OS (`malloc_trim(0)`; the tuned settings otherwise keep
    it until exit) unless TINYKG_CPU_ALLOCATOR=default; True when memory was handed back. Called
    once a session is built, so what building it freed does not stay under the training's peak."""
    trim = _glibc_malloc_trim()
    if trim is None or requested() == "default":
        return False
    return trim(0) == 1


def releases_between_phases(largest_tensor_bytes: int) -> bool:
    """Whether a run whose largest parameter (an embedding table) takes `largest_tensor_bytes`
    hands its free heap back (`release_freed_memory`) at the epoch's start, before each phase
    and before each ranking.

    On a big graph each kind of work frees what the next asks for again in pieces it does not fit,
    so the kept heap grows under every later peak: whole-graph KGAT INT2 on `bench_scale`'s 10M
    graph held 1.1-1.4 GB free in a 1.7 GB heap; released between phases, in one scratch run each,
    the CF backward's peak RSS fell from 2,969 to 2,712 MiB and the valid ranking's from 3,238 to
    2,779 (`python -m benchmarks.rss_by_phase`). Its steps take seconds, against which faulting
    the released pages back in once a phase is small (not measured apart).

    A small graph's phases reuse their freed pages, which a release would make them fault in
    again every phase; glibc's own count of free heap cannot tell the two apart (700-850 MiB
    "free" on music-kgcn and lfm1m too, mostly pages already handed back).
    The switch is the size of the graph's tensors: from `PHASE_RELEASE_MIN_TABLE`, a `[nodes, dim]`
    table past glibc's largest mmap threshold (32 MiB), its whole-graph temporaries are too."""
    return largest_tensor_bytes >= PHASE_RELEASE_MIN_TABLE


def tune_cpu_allocator(large_graph: bool = False) -> bool:
    """Apply the settings above (unless TINYKG_CPU_ALLOCATOR=default); True when malloc now runs
    with them.

    `large_graph` (a run that `releases_between_phases`) adds `LARGE_GRAPH_SETTINGS`: there the
    heap's free memory sits under every peak of a phase too, not only between phases, and a block
    of 2 MiB or more is a small part of a step that takes seconds. On `bench_scale`'s 10M graph
    (whole-graph KGAT INT2, `rowwise`; `python -m benchmarks.rss_by_phase`, one scratch run each)
    the CF backward's peak RSS fell from 2,344 to 2,267 MiB and the test ranking's from 2,319 to
    2,234."""
    if requested() == "default":
        return False
    return _apply({**SETTINGS, **(LARGE_GRAPH_SETTINGS if large_graph else {})})
