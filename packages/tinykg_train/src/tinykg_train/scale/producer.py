"""`BackgroundProducer`: a thread that makes the next items while the consumer works on this one.

The producer walks `source` in order and puts `make(index, item)` into a bounded queue (`depth`
items ahead at most); the consumer iterates. Sampling a subgraph is mostly numpy, which releases the
GIL in its heavy parts, so it overlaps the training step. What is produced does not depend on thread
timing: one thread walks the source in order and `make` gets the item's index (the sampled
subgraphs seed their RNG with it). `wait_seconds` is how long the consumer waited for items.

Stopping: `close()` (also on leaving a `with` block, for any reason: an error, Ctrl-C) tells the
thread to stop, drains the queue so a blocked `put` returns, and joins it. An exception raised in the
thread is re-raised in the consumer at the item where it happened.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

POLL_SECONDS = 0.05  # how often a producer blocked on a full queue checks for a stop


class _Done:
    """End of the source."""


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class BackgroundProducer:
    """Iterate `make(index, item)` for `item` in `source`, made `depth` items ahead in a thread."""

    def __init__(
        self,
        source: Iterable[Any],
        make: Callable[[int, Any], Any],
        *,
        depth: int = 3,
        name: str = "tinykg-sampler",
    ) -> None:
        if depth < 1:
            raise ValueError(f"'depth' needs to be a positive integer (got {depth})")
        self._source, self._make = source, make
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.wait_seconds = 0.0
        self.produced = 0
        self._finished = False
        self._thread.start()

    # -- producer thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            for index, item in enumerate(self._source):
                if self._stop.is_set():
                    return
                if not self._put(self._make(index, item)):
                    return
                self.produced += 1
            self._put(_Done())
        except BaseException as error:  # handed to the consumer, raised there
            self._put(_Failed(error))
        finally:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()

    def _put(self, value: Any) -> bool:
        """Put `value` unless a stop is asked first; False when stopped."""
        while not self._stop.is_set():
            try:
                self._queue.put(value, timeout=POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    # -- consumer -------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        start = time.perf_counter()
        value = self._queue.get()
        self.wait_seconds += time.perf_counter() - start
        if isinstance(value, _Done):
            self._finished = True
            raise StopIteration
        if isinstance(value, _Failed):
            self._finished = True
            raise value.error
        return value

    def close(self) -> None:
        """Stop the thread and wait for it (it finishes the item it is making first)."""
        self._finished = True
        self._stop.set()
        while self._thread.is_alive():
            try:
                while True:
                    self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=POLL_SECONDS)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def __enter__(self) -> BackgroundProducer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
