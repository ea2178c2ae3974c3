"""Embedding tables trained row by row with lazy Adam, on the device or offloaded to host memory.

A step gathers the rows it needs (`gather`), computes a loss from them, and `step` applies
SparseAdam's update to the rows that received a gradient, in the tables' own storage: only the rows
of a step ever get a gradient or an optimizer update, so no dense gradient or dense Adam pass over
a whole table exists. With `offload=True` the tables and their Adam state live in host memory
(pinned when CUDA is available) and the device holds only a cache of hot rows (`DeviceCache`), fed
ahead of use by `prefetch` hints for coming steps (`Prefetcher`): table size is bounded by host
memory, not device memory. Both modes run the same arithmetic on the same rows, so they give the
same bits.

`moments="bfloat16"` (`--adam-state bfloat16`) keeps both Adam moments as bfloat16 (their int16 bits,
as `compact_adam` does): half the optimizer state, a table's size in all instead of twice it. A
step's rows are widened to float32 for SparseAdam's update and written back with stochastic
rounding, from a generator seeded by (seed, the table's step, the table's position), so both modes
and a resumed run draw the same noise for the same rows.

Usage, with a look-ahead of `k` steps:

    tables = RowTables({"entity": weight}, device=device, lr=1e-3, offload=True, cache_rows=100_000)
    for batch in batches[:k]: tables.prefetch(needed(batch))
    for i, batch in enumerate(batches):
        rows = tables.gather(needed(batch))          # takes the oldest hint
        if i + k < len(batches): tables.prefetch(needed(batches[i + k]))
        loss(rows("entity", batch.items), ...).backward()
        tables.step(rows)                            # every gather must be followed by its step
"""

from __future__ import annotations

import weakref

import torch

from tinykg_train.compact_adam import bfloat16_bits_to_float, round_to_bfloat16, rounding_generator
from tinykg_train.errors import ConfigError, TinyKGError
from tinykg_train.scale.device_cache import DeviceCache
from tinykg_train.scale.prefetch import Hint, Prefetcher
from tinykg_train.scale.resident import ResidentTable
from tinykg_train.scale.row_adam import adam_rows_
from tinykg_train.scale.step_rows import GatheredTable, StepRows
from tinykg_train.scale.streams import Streams

_STATE = ("weight", "exp_avg", "exp_avg_sq")
MOMENTS = {"float32": None, "bfloat16": torch.int16}  # moments as kept: the table's dtype, or bits


class RowTables:
    """Embedding tables updated row by row: kept on the device, or in (pinned) host memory with a
    device cache of hot rows, a look-ahead prefetch, and write-back of updated rows.

    `tables` (name -> float tensor [rows, dim]) are taken over and updated in place where they
    already sit in the right memory (pass clones to keep the originals). `cache_rows` (offload
    only): rows each table's device cache holds at most (capped at the table's rows); a step whose
    own rows do not fit raises, naming the smallest that works, and rows hinted for later steps give
    way to a step that needs room. None = sized by the training thread to (1 + pending hints) times
    the step's rows, doubling as it grows: the same sizes whatever the prefetch thread's timing.
    On CUDA, call it from one stream (the copies are ordered against the current stream).
    `moments`: "float32" (SparseAdam's) or "bfloat16" (module docstring; `seed` seeds its rounding).
    """

    def __init__(
        self,
        tables: dict[str, torch.Tensor],
        *,
        device: torch.device | str,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        offload: bool = False,
        cache_rows: int | None = None,
        moments: str = "float32",
        seed: int = 0,
    ):
        _check_settings(tables, lr, betas, eps, offload, cache_rows, moments)
        self.device = torch.device(device)
        self.offload = offload
        self.moments, self.seed = moments, int(seed)
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        self._steps = dict.fromkeys(tables, 0)
        # a table's place (from 1) seeds its rounding noise, as a parameter's does in CompactAdam
        self._positions = {name: k for k, name in enumerate(tables, start=1)}
        self._mismatched_hints = 0
        streams = Streams(self.device)
        if offload:
            pin = torch.cuda.is_available()
            self._stores = {
                name: DeviceCache(
                    name,
                    _host_state(t, pin, MOMENTS[moments]),
                    device=self.device,
                    capacity=cache_rows,
                    streams=streams,
                )
                for name, t in tables.items()
            }
            self._prefetcher = Prefetcher(self._load_hint)
            weakref.finalize(self, self._prefetcher.stop)
        else:
            self._stores = {
                name: ResidentTable(t, device=self.device, moment_dtype=MOMENTS[moments])
                for name, t in tables.items()
            }
            self._prefetcher = None

    # -- a step ---------------------------------------------------------------------------------

    def prefetch(self, needed: dict[str, torch.Tensor]) -> None:
        """Hint the rows of a coming step (the k-th pending hint serves the k-th next gather); they
        are copied into the caches in the background and pinned until that gather. A no-op on the
        device (nothing to copy)."""
        self._check_needed(needed)
        if self._prefetcher is not None:
            hint = Hint(
                {
                    name: torch.unique(ids.detach().cpu().long().flatten())
                    for name, ids in needed.items()
                }
            )
            self._prefetcher.submit(hint)

    def gather(self, needed: dict[str, torch.Tensor]) -> StepRows:
        """This step's rows (any shape of int ids per table; duplicates are fine) on the device, as
        leaves whose gradients `step` applies. Takes the oldest prefetch hint, if any."""
        self._check_needed(needed)
        hint = self._prefetcher.take() if self._prefetcher is not None else None
        parts: dict[str, GatheredTable] = {}
        try:
            if hint is not None and hint.error is not None:
                raise hint.error
            for name, ids in needed.items():
                parts[name] = self._gather_table(name, ids, hint)
        except BaseException:
            for name, part in parts.items():
                self._stores[name].release(part.handle)
            raise
        finally:
            if hint is not None:
                self._release_hint(hint)
        return StepRows(self, parts)

    def step(self, rows: StepRows) -> None:
        """SparseAdam on the rows that got a gradient, written into the tables' storage; releases
        the step's rows. A table whose leaf has no gradient is left alone (its step count too)."""
        if rows.owner is not self:
            raise TinyKGError(
                "these StepRows were gathered by other RowTables; step the tables that gathered them"
            )
        if rows.stepped:
            raise TinyKGError("these StepRows were already stepped; gather again for the next step")
        rows.stepped = True
        for name, part in rows.tables.items():
            store, updated = self._stores[name], False
            try:
                updated = self._update(name, store.tensors, part)
            finally:
                store.finish(part.handle, updated=updated)

    # -- whole tables ---------------------------------------------------------------------------

    def table(self, name: str) -> torch.Tensor:
        """The whole current table (device when resident, host when offloaded): live, not a copy;
        read it before the next step or clone it."""
        return self._store(name).current()[0]

    def state_dict(self) -> dict:
        """Tables, Adam moments and step counts as tensors (`torch.load(..., weights_only=True)`
        reads it back); like `nn.Module.state_dict`, the tensors are live: save before stepping on."""
        state = {}
        for name, store in self._stores.items():
            values = dict(zip(_STATE, store.current(), strict=True))
            state[name] = {**values, "step": torch.tensor(self._steps[name], dtype=torch.int64)}
        return {"tables": state}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict()`'s content (same table names and shapes); no step or hint may be pending."""
        tables = state.get("tables") if isinstance(state, dict) else None
        if not isinstance(tables, dict) or set(tables) != set(self._stores):
            got = sorted(tables) if isinstance(tables, dict) else type(state).__name__
            raise TinyKGError(
                f"RowTables state must hold tables {sorted(self._stores)} (got {got}); load one saved by these tables"
            )
        pending = (self._prefetcher.pending if self._prefetcher else 0) + sum(
            s.pinned() for s in self._stores.values()
        )
        if pending:
            raise TinyKGError(
                "load_state_dict while steps or prefetch hints are pending; load before gathering or call cancel_prefetch()"
            )
        for name, store in self._stores.items():
            entry = tables[name]
            if not isinstance(entry, dict) or not {*_STATE, "step"} <= set(entry):
                raise TinyKGError(
                    f"state of table '{name}' must hold {[*_STATE, 'step']}; load one saved by RowTables.state_dict()"
                )
            for key, kept in zip(_STATE, store.current(), strict=True):
                if tuple(entry[key].shape) != (store.n_rows, store.dim):
                    raise TinyKGError(
                        f"state of table '{name}' has {key} of shape {tuple(entry[key].shape)}, the table is "
                        f"{(store.n_rows, store.dim)}; load a state saved by tables of the same sizes"
                    )
                if entry[key].dtype != kept.dtype:
                    raise TinyKGError(
                        f"state of table '{name}' holds {key} as {entry[key].dtype}, these tables keep "
                        f"{kept.dtype} ({self.moments} moments); resume with the --adam-state it was saved with"
                    )
        for name, store in self._stores.items():
            store.load(*(tables[name][key] for key in _STATE))
            self._steps[name] = int(tables[name]["step"])

    # -- bookkeeping ----------------------------------------------------------------------------

    def memory(self) -> dict[str, int]:
        """Bytes held: `device` (tables or cache, and their Adam rows) and `host` (offloaded tables,
        their Adam state and the cache's slot index), with the parts summed into them."""
        totals: dict[str, int] = {}
        for store in self._stores.values():
            for key, value in store.memory().items():
                totals[key] = totals.get(key, 0) + value
        totals["device"] = totals["device_tables"] + totals["device_optimizer"]
        totals["host"] = totals["host_tables"] + totals["host_optimizer"] + totals["host_index"]
        return totals

    def stats(self) -> dict[str, dict[str, int]]:
        """Per table: cache capacity, hits, misses, prefetched rows, evictions, rows written back,
        hints skipped (did not fit), growths; and `hints_mismatched` (tables gathered unlike their hint)."""
        out = {
            name: {"capacity": getattr(s, "capacity", s.n_rows), **s.counts}
            for name, s in self._stores.items()
        }
        out["all"] = {"hints_mismatched": self._mismatched_hints}
        return out

    def empty_caches(self) -> list[str]:
        """Offloaded tables: write dirty rows back and free each device cache that has nothing
        pinned and no fixed `cache_rows` (`DeviceCache.empty`), before a block that reads whole
        tables; the names of the caches emptied."""
        return [name for name, store in self._stores.items() if store.empty()]

    def cancel_prefetch(self) -> None:
        """Drop every pending hint (say at the end of an epoch), releasing the rows it pinned."""
        while self._prefetcher is not None and (hint := self._prefetcher.take()) is not None:
            self._release_hint(hint)

    def close(self) -> None:
        """Drop pending hints and stop the prefetch thread (it also stops when the tables are collected)."""
        self.cancel_prefetch()
        if self._prefetcher is not None:
            self._prefetcher.close()

    def __enter__(self) -> RowTables:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------

    def _gather_table(self, name: str, ids: torch.Tensor, hint: Hint | None) -> GatheredTable:
        store = self._store(name)
        ids = ids.detach().long().flatten()
        if self.offload:
            ids_host = torch.unique(ids.cpu())
            if hint is not None and not torch.equal(hint.ids.get(name, ids_host[:0]), ids_host):
                self._mismatched_hints += 1
            handle = store.acquire(ids_host, lookahead=self._prefetcher.pending)
            index = handle.to(self.device, non_blocking=True)
            unique = ids_host.to(self.device, non_blocking=True)
        else:
            unique = torch.unique(ids.to(self.device))
            ids_host = unique if unique.device.type == "cpu" else None
            handle = store.acquire(unique)
            index = unique
        leaf = store.tensors[0].index_select(0, index).requires_grad_()
        return GatheredTable(unique, leaf, index, handle, ids_host)

    def _update(self, name: str, tensors: tuple[torch.Tensor, ...], part: GatheredTable) -> bool:
        grad = part.leaf.grad
        if grad is None:
            return False
        self._steps[name] += 1  # SparseAdam counts every step in which the table had a gradient
        index = part.index
        if grad.is_sparse:
            grad = grad.coalesce()
            index = index[grad.indices()[0]]
            grad = grad.values()
        if grad.numel() == 0:
            return False
        rows = [tensor.index_select(0, index) for tensor in tensors]
        compact = MOMENTS[self.moments] is not None
        if compact:
            rows[1:] = [bfloat16_bits_to_float(bits) for bits in rows[1:]]
        adam_rows_(
            *rows,
            grad,
            step=self._steps[name],
            lr=self.lr,
            beta1=self.betas[0],
            beta2=self.betas[1],
            eps=self.eps,
        )
        if compact:
            step, position = self._steps[name], self._positions[name]
            generator = rounding_generator(self.seed, step, position, grad.device)
            rows[1:] = [round_to_bfloat16(moment, generator) for moment in rows[1:]]
        for tensor, updated in zip(tensors, rows, strict=True):
            tensor.index_copy_(0, index, updated)
        return True

    def _load_hint(self, hint: Hint) -> None:
        """Prefetch thread: pin and copy in one hint's rows, table by table."""
        for name, ids in hint.ids.items():
            pins = self._stores[name].hint(ids)
            if pins is not None:
                hint.slots[name] = pins

    def _release_hint(self, hint: Hint) -> None:
        for name, pins in hint.slots.items():
            self._stores[name].release_hint(pins)
        hint.slots = {}

    def _store(self, name: str):
        store = self._stores.get(name)
        if store is None:
            raise TinyKGError(
                f"unknown embedding table '{name}'; the tables are {sorted(self._stores)}"
            )
        return store

    def _check_needed(self, needed: dict[str, torch.Tensor]) -> None:
        for name, ids in needed.items():
            store = self._store(name)
            if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.is_complex():
                raise TinyKGError(
                    f"ids of table '{name}' must be an integer tensor (got {getattr(ids, 'dtype', type(ids).__name__)})"
                )
            low, high = (int(ids.min()), int(ids.max())) if ids.numel() else (0, -1)
            if low < 0 or high >= store.n_rows:
                raise TinyKGError(
                    f"ids of table '{name}' range over [{low}, {high}] but the "
                    f"table has {store.n_rows} rows; pass ids in [0, {store.n_rows - 1}]"
                )


def _host_state(
    weight: torch.Tensor, pin: bool, moment_dtype: torch.dtype | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(weight, exp_avg, exp_avg_sq) in host memory, pinned when `pin` (a copy only where needed);
    the moments in `moment_dtype` (None: the weight's)."""
    weight = weight.detach().cpu()
    if pin and not weight.is_pinned():
        weight = weight.pin_memory()
    dtype = moment_dtype or weight.dtype
    moments = [torch.zeros_like(weight, dtype=dtype, pin_memory=pin) for _ in range(2)]
    return weight, moments[0], moments[1]


def _check_settings(tables, lr, betas, eps, offload, cache_rows, moments) -> None:
    if not isinstance(tables, dict) or not tables:
        raise ConfigError("RowTables needs a non-empty dict of name -> embedding table tensors")
    if moments not in MOMENTS:
        raise ConfigError(
            f"'moments' must be one of {', '.join(MOMENTS)} (got {moments!r}); row-wise second "
            "moments need dense Adam's tables (--adam-state rowwise without --sparse-adam)"
        )
    for name, t in tables.items():
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or not t.is_floating_point():
            raise ConfigError(f"table '{name}' must be a 2-D floating-point tensor [rows, dim]")
    if not lr > 0:
        raise ConfigError(f"'lr' must be positive (got {lr})")
    if not eps > 0:
        raise ConfigError(f"'eps' must be positive (got {eps})")
    if not all(0.0 <= b < 1.0 for b in betas):
        raise ConfigError(f"'betas' must both lie in [0, 1) (got {betas})")
    if cache_rows is not None:
        if not offload:
            raise ConfigError(
                "'cache_rows' sizes the device cache of offloaded tables; pass offload=True or drop it"
            )
        if isinstance(cache_rows, bool) or not isinstance(cache_rows, int) or cache_rows < 1:
            raise ConfigError(
                f"'cache_rows' must be a positive integer or None (got {cache_rows!r})"
            )
