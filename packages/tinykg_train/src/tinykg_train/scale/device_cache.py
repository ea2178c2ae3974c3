"""One embedding table and its Adam state in host memory, with a device cache of hot rows.

Rows are *pinned* while something will use them: by a step from its gather to its step (`acquire`,
`finish`), and by a look-ahead hint from its load to its gather (`hint`, `release_hint`). Eviction
takes unpinned rows, least recently used first; the prefetch thread never evicts a pinned row (a
hint that does not fit is skipped); a gather that finds no room evicts rows hinted for later steps,
newest hint first, before it would fail, so a too deep look-ahead costs misses, never an error, and
whether a step fits depends only on the steps themselves, not on how far the thread got. LRU rather
than LFU: a stamp per access is O(1), it follows a working set that moves (epochs reshuffle batches),
and the hot rows of a power-law graph are touched nearly every step, so LRU keeps them too;
knowledge of the future comes from the look-ahead, not from the eviction rule.

Write-back on eviction: an updated row stays on the device, marked dirty, and is copied to the host
only when its slot is reused, so hot rows cost no host traffic. `flush()` writes every dirty row
back; the full-table readers (`RowTables.table`, `state_dict`) call it first, so they see current
values.

Threads: the training thread and the prefetch thread share a cache under `lock`. Only the training
thread replaces the cache tensors (growth) and writes step-pinned slots (the update), so it may read
and write its own pinned slots without the lock; the bookkeeping (slots, pins, stamps, dirty flags)
changes only under it. On CUDA the two threads' streams order their copies with `Streams`' events.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from tinykg_train.errors import TinyKGError
from tinykg_train.scale.streams import Streams

_NEVER = torch.iinfo(torch.int64).max  # the stamp that keeps a slot out of the LRU choice


@dataclass(frozen=True)
class HintPins:
    """Slots a hint pinned, with their generation: a slot evicted since (its generation moved on)
    is no longer the hint's to release."""

    slots: torch.Tensor
    generation: torch.Tensor


class DeviceCache:
    """`host` = (weight, exp_avg, exp_avg_sq) [rows, dim] in host memory, updated in place.

    `capacity` = most rows held on the device; a step whose own rows do not fit raises, naming the
    smallest capacity that works. None = sized by the training thread: at least (1 + pending hints)
    times the step's rows, doubling when it grows, never beyond the table.
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
            ("hits", "misses", "prefetched", "evicted", "written_back", "hints_skipped")
            + ("hints_evicted", "grown", "emptied"),
            0,
        )
        self._device = device
        self._streams = streams
        self._slot_of = torch.full((self.n_rows,), -1, dtype=torch.int32)
        self._no_slots()
        self._clock = 0
        self._resize(min(capacity, self.n_rows) if self.fixed else 0)

    @property
    def capacity(self) -> int:
        return self._row_of.numel()

    def acquire(self, ids: torch.Tensor, *, lookahead: int = 0) -> torch.Tensor:
        """Pin a step's rows `ids` (sorted, unique, int64 on the host) until `finish`, copying misses
        in; their slots (host int64). `lookahead` = hints pending after this step (sizes a cache
        without a fixed capacity). Training thread only."""
        with self.lock:
            self._streams.main_waits()
            if not self.fixed:  # room for this step, the steps not yet stepped, and the look-ahead
                others = int((self._step_pins > 0).sum())
                self._reserve(max((1 + lookahead) * ids.numel(), ids.numel() + others))
            slots = self._place(ids, background=False)
            self._streams.main_done()
        return slots

    def hint(self, ids: torch.Tensor) -> HintPins | None:
        """Prefetch thread: pin a coming step's rows until `release_hint`, copying misses in on the
        side stream; None (nothing pinned) when they do not fit without evicting pinned rows."""
        with self.lock, self._streams.side():
            self._streams.side_waits()
            slots = self._place(ids, background=True)
            self._streams.side_done()
            return None if slots is None else HintPins(slots, self._generation[slots])

    def release(self, slots: torch.Tensor) -> None:
        """Unpin a step's slots without an update (a gather that failed part way)."""
        with self.lock:
            self._step_pins[slots] -= 1

    def release_hint(self, pins: HintPins) -> None:
        """Unpin what a hint pinned, except slots evicted since (they hold other rows now)."""
        with self.lock:
            still = self._generation[pins.slots] == pins.generation
            self._hint_pins[pins.slots[still]] -= 1

    def finish(self, slots: torch.Tensor, *, updated: bool) -> None:
        """End a step that acquired `slots`: mark them dirty when it wrote them, then unpin them."""
        with self.lock:
            self._streams.main_done()  # the update is what an eviction of these slots waits for
            if updated:
                self._dirty[slots] = True
            self._step_pins[slots] -= 1

    def flush(self) -> None:
        """Write every dirty row back to the host, so `host` holds the current table."""
        with self.lock:
            self._streams.main_waits()
            dirty = self._dirty.nonzero().flatten()
            if dirty.numel():
                self._write_back(dirty)
                self._dirty[dirty] = False

    def empty(self) -> bool:
        """Write every dirty row back and give the cache's device memory up, for a block that reads
        the whole table instead (evaluation, KGAT's attention refresh): the cache and a whole copy
        are never on the device together. The next step's rows are copied in again (misses), and a
        cache without a fixed capacity grows back to what the steps need. A fixed-capacity cache,
        one with pinned rows (a pending step or hint) or one already empty is left as it is: False."""
        with self.lock:
            pinned = bool(((self._step_pins > 0) | (self._hint_pins > 0)).any())
            if self.fixed or self.capacity == 0 or pinned:
                return False
            self._streams.main_waits()
            dirty = self._dirty.nonzero().flatten()
            if dirty.numel():
                self._write_back(dirty)
            self._slot_of[self._row_of[self._row_of >= 0]] = -1
            self._no_slots()
            self.counts["emptied"] += 1
            return True

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
            self._hint_pins.fill_(0)
            self._generation += 1

    def held(self) -> torch.Tensor:
        """The table rows the cache holds now (sorted host ids)."""
        with self.lock:
            return self._row_of[self._row_of >= 0].sort().values

    def pinned(self) -> int:
        """Rows pinned by pending steps and loaded hints."""
        with self.lock:
            return int(((self._step_pins > 0) | (self._hint_pins > 0)).sum())

    def memory(self) -> dict[str, int]:
        """Bytes: the cache and its Adam rows on the device; the table, its state and the slot
        bookkeeping on the host."""
        index = (self._slot_of, self._row_of, self._last_use, self._step_pins, self._hint_pins)
        index += (self._generation, self._dirty)
        return {
            "device_tables": _nbytes(self.tensors[:1]),
            "device_optimizer": _nbytes(self.tensors[1:]),
            "host_tables": _nbytes(self.host[:1]),
            "host_optimizer": _nbytes(self.host[1:]),
            "host_index": _nbytes(index),
        }

    def _pins(self, background: bool) -> torch.Tensor:
        return self._hint_pins if background else self._step_pins

    def _place(self, ids: torch.Tensor, *, background: bool) -> torch.Tensor | None:
        slots = self._slot_of[ids].long()
        hit = slots >= 0
        # pinned first, so that this request's misses cannot evict its hits
        self._pins(background)[slots[hit]] += 1
        missing = ids[~hit]
        if missing.numel():
            try:
                free = self._free_slots(missing.numel(), background)
            except TinyKGError:  # a fixed cache too small: nothing placed, unpin the hits again
                self._pins(background)[slots[hit]] -= 1
                raise
            if free is None:
                self._pins(background)[slots[hit]] -= 1
                self.counts["hints_skipped"] += 1
                return None
            self._evict(free)
            self._load(free, missing)
            self._slot_of[missing] = free.to(torch.int32)
            self._row_of[free] = missing
            slots[~hit] = free
            self._pins(background)[free] += 1  # looked up again: a growth replaces the tensors
        self._last_use[slots] = self._clock
        self._clock += 1
        if background:
            self.counts["prefetched"] += missing.numel()
        else:
            self.counts["hits"] += ids.numel() - missing.numel()
            self.counts["misses"] += missing.numel()
        return slots

    def _free_slots(self, count: int, background: bool) -> torch.Tensor | None:
        """`count` slots to fill: unpinned ones, empty or least recently used first; for a step,
        then rows hinted for later steps, newest hint first; grows or raises when still short."""
        idle = (self._step_pins == 0) & (self._hint_pins == 0)
        n_idle = int(idle.sum())
        if n_idle >= count:
            stamps = self._last_use.masked_fill(~idle, _NEVER)
            return torch.topk(stamps, count, largest=False, sorted=False).indices
        if background:
            return None
        evictable = self._step_pins == 0
        if int(evictable.sum()) < count:
            needed = count + int((~evictable).sum())
            if self.fixed:
                raise TinyKGError(
                    f"cache_rows={self.capacity} is too small for table '{self.name}': a step needs "
                    f"{needed} of its rows in the cache at once; use cache_rows >= {needed}, better "
                    f"(1 + look-ahead) times that"
                )
            self._grow(needed)
            return self._free_slots(count, background)
        hinted = self._last_use.masked_fill(~(evictable & ~idle), -1)
        dropped = torch.topk(hinted, count - n_idle, largest=True, sorted=False).indices
        self.counts["hints_evicted"] += dropped.numel()
        return torch.cat([idle.nonzero().flatten(), dropped])

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
        self._hint_pins[slots] = 0
        self._generation[slots] += 1

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

    def _reserve(self, rows: int) -> None:
        """Grow a cache without a fixed capacity to hold at least `rows` rows."""
        if self.capacity < min(rows, self.n_rows):
            self._grow(rows)

    def _grow(self, rows: int) -> None:
        self._resize(min(self.n_rows, max(rows, 2 * self.capacity)))
        self.counts["grown"] += 1

    def _no_slots(self) -> None:
        """A cache of capacity 0: no device rows, no slot bookkeeping (`_resize` grows it)."""
        self.tensors = tuple(
            torch.empty((0, self.dim), dtype=t.dtype, device=self._device) for t in self.host
        )
        self._row_of = torch.empty(0, dtype=torch.int64)
        self._last_use = torch.empty(0, dtype=torch.int64)
        self._step_pins = torch.empty(0, dtype=torch.int32)
        self._hint_pins = torch.empty(0, dtype=torch.int32)
        self._generation = torch.empty(0, dtype=torch.int64)
        self._dirty = torch.empty(0, dtype=torch.bool)

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

        def extend(values: torch.Tensor, fill: int) -> torch.Tensor:
            return torch.cat([values, torch.full((extra,), fill, dtype=values.dtype)])

        self._row_of, self._last_use = extend(self._row_of, -1), extend(self._last_use, -1)
        self._step_pins, self._hint_pins = extend(self._step_pins, 0), extend(self._hint_pins, 0)
        self._generation, self._dirty = extend(self._generation, 0), extend(self._dirty, False)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
