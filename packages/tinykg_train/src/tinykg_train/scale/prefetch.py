"""Look-ahead: a background thread that copies the rows of coming steps into the device caches.

Each `submit(hint)` names the rows one coming step needs; hints are loaded in order and matched to
gathers in order (the k-th pending hint belongs to the k-th next gather). A loaded hint keeps its
rows pinned until its gather takes it, so a look-ahead of several steps never evicts rows a pending
step needs. Loading happens on the thread (and on CUDA on a side stream from pinned buffers), so it
overlaps the training thread's forward and backward.
"""

from __future__ import annotations

import collections
import queue
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass
class Hint:
    """One coming step's rows: sorted unique host ids per table, and what the load pinned."""

    ids: dict[str, torch.Tensor]
    slots: dict[str, object] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class Prefetcher:
    """Loads hints with `load(hint)` on a daemon thread started at the first hint.

    The thread holds `load` weakly, so a forgotten owner is still collected; `close()` stops it.
    """

    def __init__(self, load: Callable[[Hint], None]):
        self._load = weakref.WeakMethod(load)
        self._queue: queue.SimpleQueue[Hint | None] = queue.SimpleQueue()
        self._pending: collections.deque[Hint] = collections.deque()
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        """Hints submitted and not yet taken by a gather."""
        return len(self._pending)

    def submit(self, hint: Hint) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tinykg-prefetch", daemon=True)
            self._thread.start()
        self._pending.append(hint)
        self._queue.put(hint)

    def take(self) -> Hint | None:
        """The oldest pending hint once it is loaded (its error set if loading failed); None if none."""
        if not self._pending:
            return None
        hint = self._pending.popleft()
        hint.done.wait()
        return hint

    def stop(self) -> None:
        """Ask the thread to end after the hints already queued (safe from any thread, even its own)."""
        self._queue.put(None)

    def close(self) -> None:
        """Stop the thread and wait for it; pending hints stay pending (take them first)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self.stop()
            if thread is not threading.current_thread():
                thread.join()

    def _run(self) -> None:
        while (hint := self._queue.get()) is not None:
            load = self._load()
            try:
                if load is None:
                    raise RuntimeError("the tables this prefetch thread served are gone")
                load(hint)
            except BaseException as error:  # handed to the gather that takes the hint
                hint.error = error
            finally:
                del load
                hint.done.set()
