"""Which backend ran each kernel call in this process: a count per (op, backend).

Runs on different CPU paths give different numbers (the native loops and inductor's draw the same
counter noise, torch's path draws `torch.rand`), so a run should say what actually ran, not what was
asked for: `auto` picks per call, and an op without loops of the requested backend for its dtype
steps down (see `dispatch`). Each public op records its call where the path is decided; recording is
a dict update (well under a microsecond against the tens of microseconds of a call).

    before = backend_usage()
    ...                                  # train, benchmark
    backend_usage(since=before)          # {"quantize": {"cpu-native": 1200, "torch": 40}, ...}
    runtime_report(since=before)         # the same plus version, native library, Triton
"""

from __future__ import annotations

from collections.abc import Mapping

from tinykg_kernels import dispatch, native

Usage = dict[str, dict[str, int]]

_calls: dict[tuple[str, str], int] = {}


def record(op: str, backend: str) -> None:
    """Count one call of `op` that ran on `backend` (one of `dispatch.RUNNING_BACKENDS`)."""
    key = (op, backend)
    _calls[key] = _calls.get(key, 0) + 1


def backend_usage(since: Mapping[str, Mapping[str, int]] | None = None) -> Usage:
    """`{op: {backend: calls}}` in this process, sorted; with `since` (an earlier result of this
    function), only the calls made after it."""
    usage: Usage = {}
    for (op, backend), calls in sorted(_calls.items()):
        calls -= (since or {}).get(op, {}).get(backend, 0)
        if calls > 0:
            usage.setdefault(op, {})[backend] = calls
    return usage


def backends_used(usage: Mapping[str, Mapping[str, int]]) -> list[str]:
    """The backends that ran at least one call in `usage` (a `backend_usage` result), sorted."""
    return sorted({backend for per_op in usage.values() for backend in per_op})


def runtime_report(since: Mapping[str, Mapping[str, int]] | None = None) -> dict:
    """What a run should record about the kernels: `version`, `backend_requested` (the
    environment's choice, or why it is invalid), `native_library` (`native.status()`), `inductor`
    (`ok`, or why compiling failed), `triton` (importable), `backends` (`backend_usage(since)`)."""
    from tinykg_kernels import __version__

    try:
        requested = dispatch.requested_backend()
    except ValueError as exc:
        requested = f"invalid: {exc}"
    inductor_failure = dispatch.cpu_ops().failure()
    return {
        "version": __version__,
        "backend_requested": requested,
        "native_library": native.status(),
        "inductor": "ok" if inductor_failure is None else f"failed: {inductor_failure}",
        "triton": dispatch.triton_installed(),
        "backends": backend_usage(since),
    }
