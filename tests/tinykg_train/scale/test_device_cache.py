"""DeviceCache: LRU eviction of unpinned rows, write-back of updated rows, growth, flush."""

from __future__ import annotations

import pytest
import torch

from tinykg_train.errors import TinyKGError
from tinykg_train.scale.device_cache import DeviceCache
from tinykg_train.scale.streams import Streams


def _cache(capacity: int | None, rows: int = 10, dim: int = 3) -> DeviceCache:
    weight = torch.arange(rows * dim, dtype=torch.float32).view(rows, dim)
    host = (weight, torch.zeros(rows, dim), torch.zeros(rows, dim))
    device = torch.device("cpu")
    return DeviceCache("entity", host, device=device, capacity=capacity, streams=Streams(device))


def _use(cache: DeviceCache, ids: list[int], *, write: float | None = None) -> torch.Tensor:
    """One step on `ids`: acquire, optionally overwrite their cached rows, finish."""
    slots = cache.acquire(torch.tensor(ids))
    if write is not None:
        for tensor in cache.tensors:
            tensor[slots] = write
    cache.finish(slots, updated=write is not None)
    return slots


def test_a_miss_copies_the_host_row_and_state_into_the_cache():
    cache = _cache(4)
    cache.host[1][7] = 0.5
    slots = cache.acquire(torch.tensor([2, 7]))
    assert torch.equal(cache.tensors[0][slots], cache.host[0][[2, 7]])
    assert torch.equal(cache.tensors[1][slots], cache.host[1][[2, 7]])
    assert cache.counts["misses"] == 2 and cache.counts["hits"] == 0


def test_the_least_recently_used_unpinned_row_is_evicted_first():
    cache = _cache(3)
    _use(cache, [0, 1, 2])
    _use(cache, [1])
    _use(cache, [0])
    _use(cache, [5])  # row 2 is the least recently used
    assert cache.held().tolist() == [0, 1, 5]
    _use(cache, [6, 7])  # then rows 1 and 0
    assert cache.held().tolist() == [5, 6, 7]
    assert cache.counts["evicted"] == 3


def test_a_pending_steps_rows_are_never_evicted():
    cache = _cache(3)
    pinned = cache.acquire(torch.tensor([0, 1]))  # a pending step: acquired, not finished
    _use(cache, [2])
    _use(cache, [3])  # only row 2 was evictable
    assert cache.held().tolist() == [0, 1, 3]
    also_pinned = cache.acquire(torch.tensor([3]))
    with pytest.raises(
        TinyKGError, match=r"cache_rows=3 is too small.*needs 4 of its rows.*use cache_rows >= 4"
    ):
        cache.acquire(torch.tensor([4]))
    assert cache.held().tolist() == [0, 1, 3] and cache.pinned() == 3
    cache.release(pinned)
    cache.release(also_pinned)
    assert cache.pinned() == 0


def test_a_hint_never_evicts_pinned_rows_and_is_skipped_when_it_does_not_fit():
    cache = _cache(4)
    step = cache.acquire(torch.tensor([0, 1]))
    first = cache.hint(torch.tensor([2, 3]))
    assert cache.hint(torch.tensor([4])) is None  # the step's and the first hint's rows stay
    assert cache.counts["hints_skipped"] == 1 and cache.counts["prefetched"] == 2
    assert cache.held().tolist() == [0, 1, 2, 3]
    cache.finish(step, updated=False)
    second = cache.hint(torch.tensor([1, 4]))  # row 1 is a hit; row 0 (unpinned now) makes room
    assert cache.held().tolist() == [1, 2, 3, 4]
    for pins in (first, second):
        cache.release_hint(pins)
    assert cache.pinned() == 0


def test_a_step_short_of_room_evicts_the_newest_hints_rows_and_their_release_is_harmless():
    cache = _cache(4)
    older = cache.hint(torch.tensor([0, 1]))
    newer = cache.hint(torch.tensor([2, 3]))
    step = cache.acquire(torch.tensor([0, 5]))  # row 0 hits; row 5 takes a slot of the newer hint
    assert cache.counts["hints_evicted"] == 1
    assert cache.held().tolist() in ([0, 1, 2, 5], [0, 1, 3, 5])
    cache.release_hint(newer)  # its evicted slot now holds row 5: that pin is not the hint's
    cache.release_hint(older)
    assert cache.pinned() == 2  # the step's rows 0 and 5
    cache.finish(step, updated=False)
    assert cache.pinned() == 0


def test_updated_rows_reach_the_host_when_evicted_and_clean_rows_are_not_copied():
    cache = _cache(2)
    _use(cache, [0], write=100.0)
    clean = _use(cache, [1])
    for tensor in cache.tensors:
        tensor[clean] = -1.0  # not marked updated: must not reach the host
    _use(cache, [5, 6])
    assert torch.equal(cache.host[0][0], torch.full((3,), 100.0))
    assert torch.equal(cache.host[2][0], torch.full((3,), 100.0))
    assert torch.equal(cache.host[0][1], torch.tensor([3.0, 4.0, 5.0]))
    assert cache.counts["written_back"] == 1


def test_current_flushes_every_updated_row_and_keeps_it_cached():
    cache = _cache(4)
    _use(cache, [3, 4], write=7.0)
    weight, exp_avg, _ = cache.current()
    assert torch.equal(weight[[3, 4]], torch.full((2, 3), 7.0))
    assert torch.equal(exp_avg[[3, 4]], torch.full((2, 3), 7.0))
    assert cache.held().tolist() == [3, 4]
    cache.current()
    assert cache.counts["written_back"] == 2  # flushed rows are clean until updated again


def test_a_cache_without_a_size_grows_keeping_its_rows_and_their_updates():
    cache = _cache(None)
    assert cache.capacity == 0
    _use(cache, [0, 1, 2], write=9.0)
    assert cache.capacity == 3
    pinned = cache.acquire(torch.tensor([0, 1, 2]))
    cache.finish(
        cache.acquire(torch.tensor([4, 5, 6, 7])), updated=False
    )  # 3 pinned + 4: grow to 7
    assert cache.capacity == 7 and cache.counts["grown"] == 2
    cache.release(pinned)
    assert torch.equal(cache.current()[0][[0, 1, 2]], torch.full((3, 3), 9.0))
    cache.finish(cache.acquire(torch.arange(10), lookahead=5), updated=False)
    assert cache.capacity == 10  # never beyond the table


def test_load_replaces_the_table_and_empties_the_cache():
    cache = _cache(4)
    _use(cache, [1, 2], write=5.0)
    fresh = torch.ones(10, 3)
    cache.load(fresh, fresh * 2, fresh * 3)
    assert cache.held().numel() == 0
    slots = cache.acquire(torch.tensor([1]))
    assert torch.equal(cache.tensors[0][slots], torch.ones(1, 3))
    assert torch.equal(cache.tensors[2][slots], torch.full((1, 3), 3.0))


def test_empty_writes_updated_rows_back_frees_the_cache_and_grows_back():
    cache = _cache(None)
    _use(cache, [2, 5], write=4.0)
    _use(cache, [7])
    assert cache.capacity == 2
    assert cache.empty()
    assert cache.capacity == 0 and cache.memory()["device_tables"] == 0
    assert cache.memory()["device_optimizer"] == 0 and cache.held().numel() == 0
    assert torch.equal(cache.host[0][[2, 5]], torch.full((2, 3), 4.0))  # written back
    assert torch.equal(cache.host[1][[2, 5]], torch.full((2, 3), 4.0))
    assert cache.counts["written_back"] == 2 and cache.counts["emptied"] == 1
    assert not cache.empty() and cache.counts["emptied"] == 1  # nothing left to give up
    slots = cache.acquire(torch.tensor([5, 8]))  # copied in again from the host, as misses
    assert cache.capacity == 2
    assert torch.equal(cache.tensors[0][slots], torch.tensor([[4.0] * 3, [24.0, 25.0, 26.0]]))
    cache.finish(slots, updated=False)
    assert cache.counts["misses"] == 5


def test_empty_leaves_a_cache_with_pinned_rows_or_a_fixed_size_as_it_is():
    cache = _cache(None)
    pending = cache.acquire(torch.tensor([1, 3]))
    assert not cache.empty() and cache.held().tolist() == [1, 3]
    cache.finish(pending, updated=False)
    pins = cache.hint(torch.tensor([4]))
    assert not cache.empty() and 4 in cache.held().tolist()  # (in the slot of row 1, unpinned)
    cache.release_hint(pins)
    assert cache.empty() and cache.held().numel() == 0
    fixed = _cache(4)
    _use(fixed, [0, 1], write=2.0)
    assert not fixed.empty() and fixed.capacity == 4 and fixed.held().tolist() == [0, 1]
    assert fixed.counts["emptied"] == 0
