"""Propagation over a fixed graph with edge weights that need no gradient, as a CSR sparse matmul
(`tinykg_kernels.csr_matmul`: native loops for float32 CPU tensors, torch's CSR product elsewhere).

`ops.spmm` gathers one message per edge (`[E, dim]`) and scatters it back; on the CKG of lfm1m
(1.6M edges) that is ~20x slower on CPU than a CSR matmul, which never builds the messages. When the
edge weights need no gradient (LightGCN's normalised adjacency, KGAT's per-epoch attention, KGIN's
item means) the backward needs only the transposed matrix, so nothing of `x` is saved: the memory
held for backward is the same as `ops.spmm`'s (the weights when they are not a buffer), the time is not.

Duplicate (target, source) pairs (one item linked to an entity by two relations) are merged into one
matrix entry holding the sum of their weights, which is the same sum `ops.spmm` computes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from tinykg_kernels import csr_matmul, csr_transposed_add_, dispatch, native, usage
from tinykg_train.compress.saving import apply_compressed

INT32_LIMIT = 2**31 - 1


class CSRGraph(nn.Module):
    """The structure of `A[target, source]` and of its transpose, as int32 CSR buffers.

    `edge_index` `[2, E]`: row 0 sources (`< num_sources`), row 1 targets (`< num_nodes`).
    `values(edge_weight)` turns per-edge weights (in `edge_index` order) into matrix entries;
    `forward(x, values)` is `A @ x` with the backward `A^T @ grad`.
    """

    def __init__(
        self,
        edge_index: torch.Tensor,
        num_nodes: int,
        num_sources: int | None = None,
        *,
        transposed: bool = True,
    ):
        """`transposed=False`: the transpose's structure (3 index words per entry) is built only
        when a backward first asks for it, for a graph whose gradients go through blocks of rows
        (`add_transposed_rows`) or that is only read without gradient."""
        super().__init__()
        self.num_nodes = int(num_nodes)
        self.num_sources = int(num_sources if num_sources is not None else num_nodes)
        keys, slot = _entry_keys(edge_index, self.num_sources)
        rows, cols = keys // self.num_sources, keys % self.num_sources
        del keys
        self.index_dtype = (
            torch.int32
            if max(len(cols), num_nodes, self.num_sources) < INT32_LIMIT
            else torch.int64
        )
        self.register_buffer("slot", slot.to(self.index_dtype), persistent=False)
        self.register_buffer("crow", _crow(rows, self.num_nodes), persistent=False)
        self.register_buffer("col", cols.to(self.index_dtype), persistent=False)
        for name in ("transposed_order", "crow_t", "col_t"):
            self.register_buffer(name, None, persistent=False)
        if transposed:
            self._build_transposed(rows, cols)
        # `row_bounds`' copy: a plain attribute, so it stays on the host when the module moves
        self._host_crow = self.crow.cpu()

    def _build_transposed(self, rows: torch.Tensor, cols: torch.Tensor) -> None:
        """`A^T` in CSR: the entries' order by (column, row), its row pointers and columns."""
        transposed = torch.argsort(cols * self.num_nodes + rows)
        self.transposed_order = transposed.to(self.index_dtype)
        self.crow_t = _crow(cols[transposed], self.num_sources)
        self.col_t = rows[transposed].to(self.index_dtype)

    def transposed(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(transposed_order, crow_t, col_t)`, built from the CSR on first use if the graph was
        made without them (the same order: entries sorted by (column, row) are unique keys)."""
        if self.transposed_order is None:
            self._build_transposed(self.entry_rows().long(), self.col.long())
        return self.transposed_order, self.crow_t, self.col_t

    @property
    def num_entries(self) -> int:
        return int(self.col.shape[0])

    def entry_rows(self) -> torch.Tensor:
        """Each matrix entry's row (its target), `[num_entries]`, made on request: a count of
        the rows that end at or before each entry, in the index dtype (`repeat_interleave` went
        through an int64 `[num_entries]` index: 134 MiB more at 17.5M edges)."""
        rows = torch.zeros(self.num_entries, dtype=self.col.dtype, device=self.col.device)
        ends = self.crow[1:-1]
        ends = ends[ends < self.num_entries]  # rows after the last entry end past it
        rows.index_add_(
            0, ends, torch.ones(1, dtype=rows.dtype, device=rows.device).expand(len(ends))
        )
        return rows.cumsum_(0)

    def edge_ends(
        self, edges: torch.Tensor | None = None, entry_rows: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(sources, targets)` of the given edges (positions in the `edge_index` the graph was
        made from; all of them when None), read from the CSR through `slot`: a model need not keep
        the edge list beside it (two index words per edge). `entry_rows`: `entry_rows()`, for
        many calls (else each looks its edges' rows up in the row pointers)."""
        slot = self._edge_slot()
        return self.entry_ends(slot if edges is None else slot[edges], entry_rows)

    def entry_ends(
        self, entries: torch.Tensor, entry_rows: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(sources, targets)` of matrix entries: their columns and rows (`entry_rows` as in
        `edge_ends`)."""
        if entry_rows is not None:
            return self.col[entries], entry_rows[entries]
        targets = torch.searchsorted(self.crow.long(), entries.long(), right=True) - 1
        return self.col[entries], targets.to(self.col.dtype)

    def forget_edges(self) -> None:
        """Drop the edge -> entry map (`slot`, one index word per edge) for a graph that is only
        multiplied from now on: `edge_ends` and `values` then raise."""
        self.slot = None

    def _edge_slot(self) -> torch.Tensor:
        if self.slot is None:
            raise RuntimeError(
                "this graph's edge -> entry map was dropped (forget_edges): per-edge reads need "
                "the graph built anew"
            )
        return self.slot

    def values(self, edge_weight: torch.Tensor) -> torch.Tensor:
        """Matrix entries from per-edge weights (duplicate pairs summed); no gradient."""
        edge_weight = edge_weight.detach()
        return edge_weight.new_zeros(self.num_entries).index_add_(0, self._edge_slot(), edge_weight)

    def matrix(self, values: torch.Tensor) -> torch.Tensor:
        return _csr(self.crow, self.col, values, (self.num_nodes, self.num_sources))

    def forward(self, x: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """`A @ x` for `x [num_sources, dim]`: `[num_nodes, dim]`."""
        if x.shape[0] != self.num_sources:
            raise ValueError(
                f"'x' needs {self.num_sources} rows, one per source node (got {x.shape[0]})"
            )
        return apply_compressed(_CSRMatmul, x, values.detach(), self)

    @torch.no_grad()
    def rows(self, x: torch.Tensor, values: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """Rows `start:stop` of `A @ x` (no gradient): each row the same bits as in the whole
        product (a row is a sum over its own entries, in order)."""
        chosen = dispatch.select_backend(x.device, None, dispatch.CPU_LOOPS_MIN_NUMEL)
        # as `csr_matmul` chooses for the whole product; native row pointers index all entries
        if chosen == "cpu-native" and native.csr_applies(self.crow, self.col, values, x):
            usage.record("csr_matmul", "cpu-native")
            return native.csr_matmul(self.crow[start : stop + 1], self.col, values, x)
        usage.record("csr_matmul", "torch")
        first, last = self.row_bounds(start, stop)
        crow = self.crow[start : stop + 1] - first
        shape = (stop - start, self.num_sources)
        return _csr(crow, self.col[first:last], values[first:last], shape) @ x.contiguous()

    @torch.no_grad()
    def gathered_rows(
        self,
        rows_of: Callable[[torch.Tensor], torch.Tensor],
        values: torch.Tensor,
        start: int,
        stop: int,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`rows(x, values, start, stop)` where `x` is never whole: `rows_of(ids)` gives x's rows
        at the sorted source ids these rows read, each once. The same bits: each row sums the
        same entries in the same order. `positions`: a `[num_sources]` scratch buffer of the
        column dtype, for many calls (each call overwrites the entries it uses).

        Called once per block of a whole-graph backward (dozens at 10M triples), so the index work
        uses torch's `index_*` kernels and numpy's `flatnonzero`, several times faster on the CPU
        than advanced indexing and `nonzero`."""
        first, last = self.row_bounds(start, stop)
        cols = self.col[first:last]
        long_cols = cols.long()
        used = torch.zeros(self.num_sources, dtype=torch.bool, device=cols.device)
        used.index_fill_(0, long_cols, True)
        sources = _true_positions(used)
        del used
        if positions is None or positions.dtype != cols.dtype:
            positions = torch.empty(self.num_sources, dtype=cols.dtype, device=cols.device)
        order = torch.arange(len(sources), dtype=cols.dtype, device=cols.device)
        local_col = positions.index_copy_(0, sources, order).index_select(0, long_cols)
        del long_cols, order
        local_crow = self.crow[start : stop + 1] - first
        return csr_matmul(local_crow, local_col, values[first:last], rows_of(sources))

    @torch.no_grad()
    def add_transposed_rows(
        self, x: torch.Tensor, values: torch.Tensor, start: int, stop: int, out: torch.Tensor
    ) -> torch.Tensor:
        """`out += A[start:stop]^T @ x` in place, x `[stop - start, dim]`, out `[num_sources,
        dim]`: a block of rows' gradient pushed back through `A @ x` (every block in order into a
        zeroed `out`: the backward's `A^T @ grad`, bit for bit on the CPU)."""
        return csr_transposed_add_(self.crow[start : stop + 1], self.col, values, x, out)

    def row_bounds(self, start: int, stop: int) -> tuple[int, int]:
        """`(crow[start], crow[stop])`: where rows `start:stop` begin and end among the entries,
        read from the host copy of the row pointers made with the graph (read from a CUDA tensor,
        each would wait for the device: a KGAT backward asks twice per block and per use, hundreds
        of times a step on a 10M-triple graph). The structure never changes, so the copy stays
        valid."""
        return int(self._host_crow[start]), int(self._host_crow[stop])


class _CSRMatmul(torch.autograd.Function):
    """Exact `A @ x`; saves only the matrix entries (graph data, kept as they are)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, values: torch.Tensor, graph: CSRGraph) -> torch.Tensor:
        ctx.graph = graph
        ctx.save_for_backward(values if ctx.needs_input_grad[0] else None)
        return csr_matmul(graph.crow, graph.col, values, x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        (values,) = ctx.saved_tensors
        if values is None:
            return None, None, None
        order, crow_t, col_t = ctx.graph.transposed()
        return csr_matmul(crow_t, col_t, values[order], grad), None, None


def _entry_keys(edge_index: torch.Tensor, num_sources: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct `target * num_sources + source` keys of the edges, ascending, and each edge's
    position among them: `torch.unique(keys, return_inverse=True)`'s values, with less memory.
    The keys are made in place in one int64 tensor (not from two int64 copies of the ends), sorted
    once, and the positions counted as int32 while they fit: on the 10M-triple graph (20M edges)
    building the CSR rose 944 MiB above its start through `torch.unique` and 670 MiB this way (a
    scratch check of the build alone), the highest RSS of the session's build."""
    keys = edge_index[1].to(torch.int64, copy=True)
    keys.mul_(num_sources).add_(edge_index[0])
    keys, order = torch.sort(keys)
    first = torch.ones(keys.shape, dtype=torch.bool, device=keys.device)
    torch.ne(keys[1:], keys[:-1], out=first[1:])
    position_dtype = torch.int32 if len(keys) < INT32_LIMIT else torch.int64
    positions = torch.cumsum(first, 0, dtype=position_dtype).sub_(1)
    slot = torch.empty_like(positions)
    slot[order] = positions
    del order, positions
    return keys[first], slot


def _crow(rows: torch.Tensor, num_rows: int) -> torch.Tensor:
    """CSR row pointers of sorted row ids (int32 while the entry count fits)."""
    crow = torch.zeros(num_rows + 1, dtype=torch.int64, device=rows.device)
    crow[1:] = torch.bincount(rows, minlength=num_rows).cumsum(0)
    return crow.to(torch.int32) if len(rows) < INT32_LIMIT else crow


def _csr(crow, col, values, shape) -> torch.Tensor:
    with warnings.catch_warnings():  # "CSR support is in beta state", once per process
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


def _true_positions(mask: torch.Tensor) -> torch.Tensor:
    """The int64 positions where a 1-d bool `mask` is True, ascending (`mask.nonzero()`); on the
    CPU through numpy, about 6x faster on a million entries."""
    if mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return mask.nonzero().squeeze(1)
