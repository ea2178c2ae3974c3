"""Sampled training with the big embedding tables as `RowTables` (`--sparse-adam`,
`--offload-embeddings`).

The model's big tables (`model.embedding_tables`) leave the model: their weights go into a
`RowTables` (kept on the device, or in host memory with a device cache of hot rows), each parameter
keeps an empty `[0, dim]` placeholder, and the run's dense Adam gets the model's other (small)
parameters only. Each CF step gathers the rows `model.rows_needed(...)` names and hands them to
`model.local_loss` as its `rows`; after backward, `step()` applies SparseAdam to the rows that got a
gradient, where they sit. `lookahead(items)` reads `prefetch_steps` batches ahead of the step and
hints their rows, so the prefetch thread copies them into the cache while earlier steps train. KG
steps (KGAT) read their rows on demand (`OnDemandRows`): their triples are drawn inside the step,
so they cannot be hinted ahead.

Whole-graph work (KGAT's attention refresh at each epoch start, evaluation, keeping the best
weights) reads whole tables: `whole_tables()` puts them into the model's parameters for the block
(on the CPU the table itself, no copy; on a GPU a device copy freed after the block). So training
steps hold only the cache on the device; evaluation holds the whole table there, as its whole-graph
propagation does anyway, and the cache is emptied (dirty rows written back, its memory freed)
before it, to grow back over the next steps.

The same code runs with the tables on the device (`--sparse-adam`) or offloaded; both apply the
same arithmetic to the same rows, so they train to the same bits.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from tinykg_train.errors import ConfigError, TinyKGError
from tinykg_train.scale.row_tables import RowTables
from tinykg_train.scale.step_rows import StepRows


class TableTraining:
    """The row-wise tables of one run and the per-step calls the trainer makes (module docstring)."""

    def __init__(self, model: torch.nn.Module, config: Any, device: torch.device) -> None:
        flag = "--offload-embeddings" if config.offload_embeddings else "--sparse-adam"
        names = tuple(getattr(model, "embedding_tables", ()))
        if not names or not hasattr(model, "rows_needed"):
            raise ConfigError(
                f"{type(model).__name__} names no embedding_tables read through rows: drop {flag}"
            )
        self.model, self.names, self.device = model, names, torch.device(device)
        if hasattr(model, "before_tables_leave"):  # a model of the package's base class
            model.before_tables_leave()
        self.offload, self.cache_rows = bool(config.offload_embeddings), config.cache_rows
        self.prefetch_steps = int(config.prefetch_steps)
        self.parameters = {name: getattr(model, name) for name in names}
        self.tables = RowTables(
            {name: p.detach() for name, p in self.parameters.items()},
            device=self.device,
            lr=config.lr,
            offload=self.offload,
            cache_rows=self.cache_rows,
            moments=config.adam_state,
            seed=config.seed,
        )
        self._placeholders = {
            name: torch.empty((0, p.shape[1]), dtype=p.dtype, device=self.device)
            for name, p in self.parameters.items()
        }
        self._pending: list[StepRows] = []
        self._whole = False
        self._release()

    def dense_parameters(self) -> list[torch.nn.Parameter]:
        """The model's parameters the dense Adam trains: all but the tables."""
        tables = {id(p) for p in self.parameters.values()}
        return [p for p in self.model.parameters() if id(p) not in tables]

    # -- a phase --------------------------------------------------------------------------------

    def lookahead(self, items: Iterable[tuple]) -> Iterator[tuple]:
        """`items` (CF batches with their subgraphs) in order, read `prefetch_steps` ahead of the
        one yielded, each one's rows hinted to the prefetch thread when read (offload only)."""
        ahead: collections.deque[tuple] = collections.deque()
        for item in items:
            if self.offload:
                self.tables.prefetch(self.model.rows_needed(*item))
            ahead.append(item)
            if len(ahead) > self.prefetch_steps:
                yield ahead.popleft()
        while ahead:
            yield ahead.popleft()

    def cf_loss(self, users, pos_items, neg_items, graph) -> torch.Tensor:
        """The local loss of a CF step on rows gathered for it (stepped by `step`)."""
        rows = self._gather(self.model.rows_needed(users, pos_items, neg_items, graph))
        return self.model.local_loss(users, pos_items, neg_items, graph, rows)

    def kg_loss(self, *batch, **options) -> torch.Tensor:
        """The KG phase's loss, its node rows gathered when it reads them (`options`: the model's,
        e.g. partitioned training's `interactions`)."""
        return self.model.kg_loss(*batch, rows=OnDemandRows(self), **options)

    def step(self) -> None:
        """SparseAdam on the rows of the step's gathers (after backward)."""
        pending, self._pending = self._pending, []
        for rows in pending:
            self.tables.step(rows)

    def end_phase(self) -> None:
        """Drop the hints of batches read ahead but not trained (a capped epoch)."""
        if self._pending:
            raise TinyKGError("a step gathered rows it never stepped; call step() after backward")
        self.tables.cancel_prefetch()

    def _gather(self, needed: dict[str, torch.Tensor]) -> StepRows:
        rows = self.tables.gather(needed)
        self._pending.append(rows)
        return rows

    # -- whole tables ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def whole_tables(self) -> Iterator[None]:
        """The model's table parameters hold the current tables for the block (read only).
        Offloaded, the device caches are emptied first (written back, their memory freed), so the
        block holds the whole tables without the cache beside them."""
        if self.offload:
            self.tables.empty_caches()
        for name, parameter in self.parameters.items():
            parameter.data = self.tables.table(name).to(self.device)
        self._whole = True
        try:
            yield
        finally:
            self._release()

    def load_whole_model(self, state: dict[str, torch.Tensor]) -> None:
        """Load a whole-model state (the best epoch's, tables included) into the model for good:
        the end of training (the tables' own state stays as trained)."""
        for name, parameter in self.parameters.items():
            parameter.data = torch.empty_like(state[name], device=self.device)
        self.model.load_state_dict(state)

    def _release(self) -> None:
        self._whole = False
        for name, parameter in self.parameters.items():
            parameter.data = self._placeholders[name]

    # -- checkpoint and report ------------------------------------------------------------------

    def state_dict(self) -> dict:
        return self.tables.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.tables.load_state_dict(state)

    def device_bytes(self) -> dict[str, int]:
        """Bytes the tables hold on the device: rows (`tables`, the cache when offloaded) and their
        Adam state (`optimizer`)."""
        memory = self.tables.memory()
        # inside `whole_tables` a device-resident table is the model's parameter: counted there
        aliased = self._whole and not self.offload
        return {
            "tables": 0 if aliased else memory["device_tables"],
            "optimizer": memory["device_optimizer"],
        }

    def report(self) -> dict[str, Any]:
        """metrics.json's `row_tables`: the settings, bytes on the device and the host, and the
        cache's counts in this process (a resumed run counts from its resume)."""
        return {
            "tables": list(self.names),
            "offload": self.offload,
            "cache_rows": self.cache_rows,
            "prefetch_steps": self.prefetch_steps,
            "memory": self.tables.memory(),
            "stats": self.tables.stats(),
        }

    def close(self) -> None:
        self.tables.close()


class OnDemandRows:
    """`rows(table, ids)` that gathers a table's rows when first read; a table read twice in one
    step is refused (a second gather would count a second SparseAdam step)."""

    def __init__(self, training: TableTraining) -> None:
        self.training = training
        self.read: set[str] = set()

    def __call__(self, table: str, ids: torch.Tensor) -> torch.Tensor:
        if table in self.read:
            raise TinyKGError(
                f"table '{table}' was read twice in one on-demand step; read all its rows at once"
            )
        self.read.add(table)
        return self.training._gather({table: ids})(table, ids)


def table_training(config: Any, model: Any, device: torch.device) -> TableTraining | None:
    """The run's `TableTraining` under `sparse_adam` / `offload_embeddings`, else None."""
    if not config.row_wise_tables:
        return None
    return TableTraining(model, config, device)
