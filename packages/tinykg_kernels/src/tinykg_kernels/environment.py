"""The kernels' environment variables (`TINYKG_KERNELS_BACKEND`, `TINYKG_KERNELS_NATIVE`), read when
a call asks, or once for a block (`read_once`).

Every codec or mask call asks which backend runs it, and `os.environ.get` costs about a microsecond
(four Python frames); a training step of KGIN makes close to 200 such reads. Inside `read_once`
(tinykg_train enters it for each compression or meter scope, i.e. once per step) each variable is
read on first use and that value holds until the outermost block ends; outside any block every
call reads the environment, so a test or a user may change it between calls.
"""

from __future__ import annotations

import os
import threading


class _Held(threading.local):
    def __init__(self) -> None:
        self.depth = 0
        self.values: dict[str, str | None] | None = None  # name -> raw value (None: unset)


_held = _Held()


def get(name: str, default: str) -> str:
    """`os.environ.get(name, default)`; inside `read_once`, as first read in the outermost block."""
    values = _held.values
    if values is None:
        return os.environ.get(name, default)
    if name not in values:
        values[name] = os.environ.get(name)
    value = values[name]
    return default if value is None else value


class _ReadOnce:
    """`read_once`'s context (a plain object, not a generator: entered once per training step)."""

    def __enter__(self) -> None:
        held = _held
        if held.depth == 0:
            held.values = {}
        held.depth += 1

    def __exit__(self, *exc_info: object) -> None:
        held = _held
        held.depth -= 1
        if held.depth == 0:
            held.values = None


_READ_ONCE = _ReadOnce()


def read_once() -> _ReadOnce:
    """Read each variable at most once in this block (on this thread; nested blocks share the
    outermost one's values): a change to the environment inside it shows after it ends."""
    return _READ_ONCE
