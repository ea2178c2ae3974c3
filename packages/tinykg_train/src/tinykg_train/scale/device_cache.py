"""One embedding table and its Adam state in host memory, with a device cache of hot rows.

A step's rows are *pinned* in the cache from the moment they are acquired (by a look-ahead hint or
by the step's gather) until the step is done; only unpinned rows are evicted, least recently used
first. LRU rather than LFU: a stamp per access is O(1), it follows a working set that moves (epochs
reshuffle batches), and the hot rows of a power-law graph are touched nearly every step, so LRU keeps
them too; knowledge of the future comes from the look-ahead, not from the eviction rule.

Write-back on eviction: an updated row stays on the device, marked dirty, and is copied to the host
only when its slot is reused, so hot rows cost no host traffic. `flush()` writes every dirty row
back; the full-table readers (`RowTables.table`, `state_dict`) call it first, so they see current
values.

Threads: the training thread and the prefetch thread share a cache under `lock`. Only the training
thread replaces the cache tensors (growth) and writes pinned slots (the update), so it may read and
write its own pinned slots without the lock; the bookkeeping (slots, pins, stamps, dirty flags)
changes only under it. On CUDA the two threads' streams order their copies with `Streams`' events.
"""

from __future__ import annotations

import contextlib
import threading

import torch

from tinykg_train.errors import TinyKGError
from tinykg_train.scale.streams import Streams

_NEVER = torch.iinfo(torch.int64).max  # the stamp that keeps a pinned slot out of the LRU choice


class DeviceCache:
    """`host` = (weight, exp_avg, exp_avg_sq) [rows, dim] in host memory, updated in place.

    `capacity` = most rows held on the device; None = grow on demand (doubling, never beyond the
    table) whenever a step's rows and the look-ahead's pinned rows do not fit; a fixed capacity that
    is too small for a step raises instead, naming the smallest that works.
    """

    def __init__(
        self,
        name: str,
        host: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        *,
        device: torch.device,
        capacity: int | None,
        streams: Streams,
    ):
        self.name = name
        self.host = host
        self.n_rows, self.dim = host[0].shape
        self.fixed = capacity is not None
        self.lock = threading.Lock()
        self.counts = dict.fromkeys(
            ("hits", "misses", "prefetched", "evicted", "written_back", "hints_skipped", "grown"), 0
        )
        self._device = device
        self._streams = streams
        self._slot_of = torch.full((self.n_rows,), -1, dtype=torch.int32)
        self.tensors = tuple(torch.empty((0, self.dim), dtype=t.dtype, device=device) for t in host)
        self._row_of = torch.empty(0, dtype=torch.int64)
        self._last_use = torch.empty(0, dtype=torch.int64)
        self._pins = torch.empty(0, dtype=torch.int32)
        self._dirty = torch.empty(0, dtype=torch.bool)
        self._clock = 0
        self._resize(min(capacity, self.n_rows) if self.fixed else 0)

    @property
    def capacity(self) -> int:
        return self._row_of.numel()

    def acquire(self, ids: torch.Tensor, *, background: bool = False) -> torch.Tensor | None:
        """Pin the rows `ids` (sorted, unique, int64 on the host), copying misses in; their slots
        (host int64). A background acquire (a look-ahead hint) that does not fit returns None."""
        with self.lock, self._streams.side() if background else contextlib.nullcontext():
            self._streams.side_waits() if background else self._streams.main_waits()
            slots = self._place(ids, background)
            self._streams.side_done() if background else self._streams.main_done()
        return slots

    def release(self, slots: torch.Tensor) -> None:
        """Unpin slots acquired earlier (a consumed hint, or a step that was not taken)."""
        with self.lock:
            self._pins[slots] -= 1

    def finish(self, slots: torch.Tensor, *, updated: bool) -> None:
        """End a step that acquired `slots`: mark them dirty when it wrote them, then unpin them."""
        with self.lock:
            self._streams.main_done()  # the update is what an eviction of these slots waits for
            if updated:
                self._dirty[slots] = True
            self._pins[slots] -= 1

    def flush(self) -> None:
        """Write every dirty row back to the host, so `host` holds the current table."""
        with self.lock:
            self._streams.main_waits()
            dirty = self._dirty.nonzero().flatten()
            if dirty.numel():
                self._write_back(dirty)
                self._dirty[dirty] = False

    def current(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The whole current table and state (the host tensors, flushed): live, not copies."""
        self.flush()
        return self.host

    def load(self, weight: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor) -> None:
        """Replace the table and state (no step may be pending); the cache starts empty."""
        with self.lock:
            self._streams.main_waits()
            for target, source in zip(self.host, (weight, exp_avg, exp_avg_sq), strict=True):
                target.copy_(source)
            held = self._row_of >= 0
            self._slot_of[self._row_of[held]] = -1
            self._row_of.fill_(-1)
            self._last_use.fill_(-1)
            self._dirty.fill_(False)

    def pinned(self) -> int:
        """Rows pinned by pending hints and steps."""
        with self.lock:
            return int((self._pins > 0).sum())

    def memory(self) -> dict[str, int]:
        """Bytes: the cache and its Adam rows on the device; the table, its state and the slot
        bookkeeping on the host."""
        index = (self._slot_of, self._row_of, self._last_use, self._pins, self._dirty)
        return {
            "device_tables": _nbytes(self.tensors[:1]),
            "device_optimizer": _nbytes(self.tensors[1:]),
            "host_tables": _nbytes(self.host[:1]),
            "host_optimizer": _nbytes(self.host[1:]),
            "host_index": _nbytes(index),
        }

    def _place(self, ids: torch.Tensor, background: bool) -> torch.Tensor | None:
        slots = self._slot_of[ids].long()
        hit = slots >= 0
        self._pins[slots[hit]] += 1  # first, so that this request's misses cannot evict its hits
        missing = ids[~hit]
        if missing.numel():
            free = self._free_slots(missing.numel(), background)
            if free is None:
                self._pins[slots[hit]] -= 1
                self.counts["hints_skipped"] += 1
                return None
            self._evict(free)
            self._load(free, missing)
            self._slot_of[missing] = free.to(torch.int32)
            self._row_of[free] = missing
            self._pins[free] += 1
            slots[~hit] = free
        self._last_use[slots] = self._clock
        self._clock += 1
        if background:
            self.counts["prefetched"] += missing.numel()
        else:
            self.counts["hits"] += ids.numel() - missing.numel()
            self.counts["misses"] += missing.numel()
        return slots

    def _free_slots(self, count: int, background: bool) -> torch.Tensor | None:
        """`count` unpinned slots, empty or least recently used first; grows or raises when short."""
        unpinned = self._pins == 0
        if int(unpinned.sum()) < count:
            if background:
                return None
            needed = count + int((~unpinned).sum())
            if self.fixed:
                raise TinyKGError(
                    f"cache_rows={self.capacity} is too small for table '{self.name}': this step "
                    f"and the look-ahead pin {needed} rows; use cache_rows >= {needed} or prefetch "
                    f"fewer steps ahead"
                )
            self._resize(min(self.n_rows, max(needed, 2 * self.capacity)))
            self.counts["grown"] += 1
            unpinned = self._pins == 0
        stamps = self._last_use.masked_fill(~unpinned, _NEVER)
        return torch.topk(stamps, count, largest=False, sorted=False).indices

    def _evict(self, slots: torch.Tensor) -> None:
        rows = self._row_of[slots]
        held = rows >= 0
        if held.any():
            dirty = slots[held & self._dirty[slots]]
            if dirty.numel():
                self._write_back(dirty)
            self._slot_of[rows[held]] = -1
            self.counts["evicted"] += int(held.sum())
        self._dirty[slots] = False

    def _load(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        """Copy host rows into device slots (asynchronously from pinned buffers on CUDA)."""
        on_device = slots.to(self._device, non_blocking=True)
        for cache, host in zip(self.tensors, self.host, strict=True):
            staged = self._streams.staging((rows.numel(), self.dim), host.dtype)
            torch.index_select(host, 0, rows, out=staged)
            cache.index_copy_(0, on_device, staged.to(self._device, non_blocking=True))

    def _write_back(self, slots: torch.Tensor) -> None:
        """Copy device slots to their host rows; returns once the host holds them."""
        rows = self._row_of[slots]
        on_device = slots.to(self._device, non_blocking=True)
        staged = []
        for cache in self.tensors:
            buffer = self._streams.staging((slots.numel(), self.dim), cache.dtype)
            staged.append(buffer.copy_(cache.index_select(0, on_device), non_blocking=True))
        if self._streams.cuda:
            torch.cuda.current_stream(self._device).synchronize()
        for host, buffer in zip(self.host, staged, strict=True):
            host.index_copy_(0, rows, buffer)
        self.counts["written_back"] += slots.numel()

    def _resize(self, capacity: int) -> None:
        """Grow the cache to `capacity` slots, keeping what it holds (training thread only)."""
        old = self.capacity
        grown = []
        for cache in self.tensors:
            bigger = torch.empty((capacity, self.dim), dtype=cache.dtype, device=self._device)
            bigger[:old].copy_(cache)
            grown.append(bigger)
        self.tensors = tuple(grown)
        extra = capacity - old
        self._row_of = torch.cat([self._row_of, torch.full((extra,), -1, dtype=torch.int64)])
        self._last_use = torch.cat([self._last_use, torch.full((extra,), -1, dtype=torch.int64)])
        self._pins = torch.cat([self._pins, torch.zeros(extra, dtype=torch.int32)])
        self._dirty = torch.cat([self._dirty, torch.zeros(extra, dtype=torch.bool)])


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
