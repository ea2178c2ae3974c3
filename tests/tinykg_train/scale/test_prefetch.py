"""The look-ahead: hints load in the background, in order, are hits at their gather, never lose a
pending step's rows, hand their errors to the gather, and the thread stops with its tables."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

from tinykg_train.scale import RowTables
from tinykg_train.scale.prefetch import Hint, Prefetcher


class _Loader:
    """A load function that blocks until released and records the order of the hints it got."""

    def __init__(self):
        self.release = threading.Event()
        self.order: list[int] = []

    def load(self, hint: Hint) -> None:
        self.release.wait(timeout=10)
        if "fail" in hint.ids:
            raise RuntimeError("could not copy")
        self.order.append(int(hint.ids["n"]))


def test_hints_load_on_a_background_thread_in_submission_order():
    loader = _Loader()
    prefetcher = Prefetcher(loader.load)
    for n in range(4):
        prefetcher.submit(Hint({"n": torch.tensor(n)}))  # returns while the load is blocked
    assert prefetcher.pending == 4 and loader.order == []
    loader.release.set()
    taken = [prefetcher.take() for _ in range(4)]
    assert loader.order == [0, 1, 2, 3] and [int(h.ids["n"]) for h in taken] == [0, 1, 2, 3]
    assert prefetcher.take() is None
    prefetcher.close()


def test_a_failed_load_is_handed_to_the_hint_and_the_thread_goes_on():
    loader = _Loader()
    loader.release.set()
    prefetcher = Prefetcher(loader.load)
    prefetcher.submit(Hint({"fail": torch.tensor(0)}))
    prefetcher.submit(Hint({"n": torch.tensor(1)}))
    assert isinstance(prefetcher.take().error, RuntimeError)
    assert prefetcher.take().error is None and loader.order == [1]
    prefetcher.close()


def _disjoint_steps(n_steps: int, rows: int) -> list[dict[str, torch.Tensor]]:
    """Each step needs `rows` entity rows seen in no other step (no hit can come by luck)."""
    order = torch.randperm(3000, generator=torch.Generator().manual_seed(0))
    return [{"entity": order[k * rows : (k + 1) * rows]} for k in range(n_steps)]


@pytest.mark.parametrize("lookahead", [1, 3])
def test_hinted_rows_are_all_hits_and_the_look_ahead_never_evicts_a_pending_steps_rows(
    kit, lookahead
):
    steps = _disjoint_steps(40, rows=30)
    cache_rows = (lookahead + 1) * 30  # exactly a step plus its look-ahead: no room for a mistake
    tables = RowTables(
        kit.initial_tables(), device="cpu", lr=0.01, offload=True, cache_rows=cache_rows
    )
    resident = RowTables(kit.initial_tables(), device="cpu", lr=0.01)
    for needed in steps[:lookahead]:
        tables.prefetch(needed)
    for k, needed in enumerate(steps):
        rows = tables.gather(needed)
        if k + lookahead < len(steps):
            tables.prefetch(steps[k + lookahead])
        same = resident.gather(needed)
        for batch in (rows, same):
            batch("entity", needed["entity"]).pow(3).sum().backward()
        tables.step(rows)
        resident.step(same)
    stats = tables.stats()["entity"]
    assert stats["misses"] == 0 and stats["hints_skipped"] == 0, stats
    assert stats["prefetched"] == 40 * 30 and stats["evicted"] > 0, stats
    assert torch.equal(tables.table("entity"), resident.table("entity"))
    tables.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_deep_look_ahead_racing_short_steps_keeps_the_same_bits(kit, seed):
    steps = kit.make_steps(150, batch=16, seed=seed)
    with (
        RowTables(kit.initial_tables(), device="cpu", lr=0.01) as resident,
        RowTables(
            kit.initial_tables(), device="cpu", lr=0.01, offload=True, cache_rows=120
        ) as cached,
    ):
        kit.train(resident, steps)
        kit.train(cached, steps, lookahead=5)
        kit.assert_same_state(resident.state_dict(), cached.state_dict())


def test_a_gather_unlike_its_hint_is_counted_and_still_correct(kit):
    tables = RowTables(kit.initial_tables(), device="cpu", lr=0.01, offload=True, cache_rows=64)
    tables.prefetch({"entity": torch.arange(40)})
    rows = tables.gather({"entity": torch.arange(30, 70)})  # takes the hint, releases its rows
    rows("entity", torch.arange(30, 70)).sum().backward()
    tables.step(rows)
    assert tables.stats()["all"]["hints_mismatched"] == 1
    assert tables._stores["entity"].pinned() == 0
    tables.close()


def test_a_failed_hint_load_is_raised_by_the_gather_that_takes_it(kit, monkeypatch):
    tables = RowTables(kit.initial_tables(), device="cpu", lr=0.01, offload=True, cache_rows=64)
    store = tables._stores["entity"]
    hint = store.hint

    def failing(ids):
        if ids[0] == 0:
            raise RuntimeError("host copy failed")
        return hint(ids)

    monkeypatch.setattr(store, "hint", failing)
    tables.prefetch({"user": torch.arange(5), "entity": torch.arange(10)})
    tables.prefetch({"entity": torch.arange(1, 10)})
    with pytest.raises(RuntimeError, match="host copy failed"):
        tables.gather({"entity": torch.arange(10)})
    assert tables._stores["user"].pinned() == 0  # the failed hint's other table was released
    rows = tables.gather({"entity": torch.arange(1, 10)})
    tables.step(rows)
    assert store.pinned() == 0
    tables.close()


def test_the_prefetch_thread_stops_when_its_tables_are_closed_or_collected(kit):
    threads = []
    for close in (True, False):
        tables = RowTables(kit.initial_tables(), device="cpu", lr=0.01, offload=True, cache_rows=64)
        tables.prefetch({"entity": torch.arange(10)})
        tables.step(tables.gather({"entity": torch.arange(10)}))
        threads.append(tables._prefetcher._thread)
        if close:
            tables.close()
        del tables
    gc.collect()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_prefetch_on_device_tables_is_a_no_op(kit):
    tables = RowTables(kit.initial_tables(), device="cpu", lr=0.01)
    tables.prefetch({"entity": torch.arange(10)})
    assert tables._prefetcher is None
    tables.step(tables.gather({"entity": torch.arange(10)}))
