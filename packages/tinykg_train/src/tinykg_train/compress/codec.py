"""Compress one float activation per a `CompressionConfig`, and restore it for backward.

The quantizer itself is `tinykg_kernels` (Triton on CUDA, native C++ loops for large CPU tensors,
torch for the rest; `tinykg_kernels.dispatch`); this module decides what
to compress and how it is grouped (`CompressionConfig.group_for`), optionally projects linear inputs
first (EXACT), and wraps the result so it can travel through `ctx.save_for_backward` as plain tensors
(`parts()` / `rebuild(meta, parts)`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch

from tinykg_kernels import QuantizedTensor, dequantize, live_rows, quantize, unproject
from tinykg_kernels import project as random_projection
from tinykg_kernels.packing import GroupLayout
from tinykg_train.compress import stack
from tinykg_train.compress.adaptive import sites
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.gathered import gathered_rows
from tinykg_train.compress.masks import PackedMask
from tinykg_train.compression_defaults import BITS


@dataclass(frozen=True)
class Projection:
    """A linear input stored as `project(x, ratio, seed)`: `dim` columns before projection."""

    dim: int
    seed: int


def _group_part(q: QuantizedTensor, groups: slice | torch.Tensor, rows: int) -> QuantizedTensor:
    """The groups `groups` (a range, or ids in any order) of `q`, read as `rows` rows of its last
    dim: what `Compressed.rows` and `take_rows` decode."""
    if isinstance(groups, slice):
        codes, scale, zero = q.codes[groups], q.scale[groups], q.zero[groups]
    else:
        codes, scale, zero = (t.index_select(0, groups) for t in (q.codes, q.scale, q.zero))
    shape = torch.Size((rows, q.shape[-1]))
    return QuantizedTensor(codes, scale, zero, shape, q.dtype, q.bits, q.group_size, q.scheme)


@dataclass(frozen=True)
class Compressed:
    """A float tensor stored quantized (after a random projection when `projection` is set).

    With `positive` (a `PackedMask` of x > 0, for ReLU outputs) the decoded values keep the exact
    sign pattern: zeros stay 0 and positives stay > 0 (a positive rounded down to 0 decodes as the
    smallest normal float, a bias of 1e-38), so a ReLU backward that reads `result > 0` is exact.

    With `live_rows` (a `PackedMask` `[..., 1]` of the rows not all zero; kept when a quantization
    group spans several rows and some row is all zero) those rows decode as exact zeros again. A
    zero row in a shared group would otherwise round to its neighbour's levels, and a zero row is
    often one whose gradient is huge: KGIN's entities without KG in-edges aggregate to 0, their L2
    normalization clamps the norm to 1e-12, and its backward scales their gradient by 1e12 per
    layer; exact zeros keep that from reaching any weight, rounded ones do not (at 1 bit, 64-wide
    rows two to a group, the relation embeddings' gradient error went from 1e-7 to 1e20).
    """

    quantized: QuantizedTensor
    projection: Projection | None = None
    positive: PackedMask | None = None
    live_rows: PackedMask | None = None

    def decode(self) -> torch.Tensor:
        values = dequantize(self.quantized)
        if self.projection is not None:
            values = unproject(values, self.projection.dim, self.projection.seed)
        if self.positive is not None:
            tiny = torch.finfo(values.dtype).tiny
            # times the 1/0 mask rather than torch.where on the bool (7x slower on the CPU)
            values = values.clamp_min(tiny).mul_(self.positive.decode().to(values.dtype))
        if self.live_rows is not None:
            values = values.mul_(self.live_rows.decode(values.dtype))
        return values

    @property
    def by_rows(self) -> bool:
        """Whether `rows` can read a block of rows: no projection or sign mask kept, and groups
        that hold whole rows or cut rows into whole groups."""
        q = self.quantized
        if self.projection is not None or self.positive is not None or len(q.shape) < 1:
            return False
        row_len, group_len = q.shape[-1], q.layout.group_len
        return row_len > 0 and (group_len % row_len == 0 or row_len % group_len == 0)

    def rows(self, start: int, stop: int) -> torch.Tensor | None:
        """Rows `start:stop` of the decoded tensor, read as `[rows, last dim]`, decoding only the
        groups that hold them (the same bits as those rows of `decode()`): a backward can then
        work through a whole-graph tensor a block of rows at a time. None when not `by_rows` or
        the rows are out of range."""
        if not self.by_rows:
            return None
        q = self.quantized
        row_len, group_len = q.shape[-1], q.layout.group_len
        total = q.layout.numel // row_len
        if not 0 <= start <= stop <= total:
            return None
        if group_len % row_len == 0:  # whole rows to a group
            per_group = group_len // row_len
            first, last = start // per_group, -(-stop // per_group)
            row0, row1 = first * per_group, min(last * per_group, total)
        else:  # whole groups to a row
            per_row = row_len // group_len
            first, last, row0, row1 = start * per_row, stop * per_row, start, stop
        values = dequantize(_group_part(q, slice(first, last), row1 - row0))
        values = values[start - row0 : stop - row0]
        if self.live_rows is not None:
            live = self.live_rows.decode(values.dtype).reshape(-1, 1)[start:stop]
            values = values.mul_(live)
        return values

    def take_rows(self, rows: torch.Tensor) -> torch.Tensor | None:
        """The rows `rows` (int64 ids, any order) of the decoded tensor read as `[rows, last
        dim]`, decoding only the groups that hold them (the same bits as `decode()[rows]`): a
        backward can read the rows of a whole-graph tensor that a block of the graph touches.
        None when not `by_rows`."""
        if not self.by_rows:
            return None
        q = self.quantized
        row_len, group_len = q.shape[-1], q.layout.group_len
        count = len(rows)
        if group_len % row_len == 0:  # whole rows to a group: each row's group, then the row
            per_group = group_len // row_len
            groups, decoded_rows = rows // per_group, count * per_group
        else:  # whole groups to a row
            per_group, per_row = 1, row_len // group_len
            offsets = torch.arange(per_row, device=rows.device)
            groups, decoded_rows = (rows.unsqueeze(1) * per_row + offsets).reshape(-1), count
        values = dequantize(_group_part(q, groups, decoded_rows))
        if per_group > 1:
            picked = torch.arange(count, device=rows.device) * per_group + rows % per_group
            values = values.index_select(0, picked)
        if self.live_rows is not None:
            live = self.live_rows.decode(values.dtype).reshape(-1, 1).index_select(0, rows)
            values = values.mul_(live)
        return values

    def reshaped(self, shape: torch.Size, config: CompressionConfig) -> Compressed | None:
        """The same codes read as `shape` (the same number of elements): None when the groups
        `config` gives that shape at these bits differ, or a projection or mask (whose layout
        follows the shape) is kept."""
        if self.projection is not None or self.positive is not None or self.live_rows is not None:
            return None
        q = self.quantized
        group = config.at_width(q.bits).group_for(tuple(shape))
        if GroupLayout.for_shape(tuple(shape), group, q.bits) != q.layout:
            return None
        return Compressed(
            QuantizedTensor(q.codes, q.scale, q.zero, shape, q.dtype, q.bits, group, q.scheme)
        )

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.parts())

    def parts(self) -> tuple[torch.Tensor, ...]:
        masks = (m for m in (self.positive, self.live_rows) if m is not None)
        return (*self.quantized.tensors(), *(part for mask in masks for part in mask.parts()))

    def meta(self) -> tuple[Any, Projection | None, torch.Size | None, torch.Size | None]:
        shape = lambda mask: None if mask is None else mask.meta()  # noqa: E731
        return (self.quantized.meta, self.projection, shape(self.positive), shape(self.live_rows))

    @classmethod
    def rebuild(cls, meta: tuple, parts: tuple[torch.Tensor, ...]) -> Compressed:
        quantized_meta, projection, positive_shape, live_shape = meta
        quantized = QuantizedTensor.from_tensors(quantized_meta, parts[:3])
        rest = list(parts[3:])
        positive = (
            None if positive_shape is None else PackedMask.rebuild(positive_shape, (rest.pop(0),))
        )
        live = None if live_shape is None else PackedMask.rebuild(live_shape, (rest.pop(0),))
        return cls(quantized, projection, positive, live)


@dataclass(frozen=True)
class Rescaled:
    """A tensor x stored as y = x / max(scale, least) and the exact `scale` (broadcast against y):
    an L2 normalization's input, from the output and row norms it saves anyway (`offer_rescaled`;
    the norms are the same tensor, held once). Quantizing y rather than x gives every row the same
    range, however different their norms. `stored` is y compressed, or y itself where it is kept
    exact (a `bits: auto` plan, or a tensor too small to compress)."""

    stored: Compressed | torch.Tensor
    scale: torch.Tensor
    least: float = 0.0

    def decode(self) -> torch.Tensor:
        scale = self.scale.clamp_min(self.least)
        if isinstance(self.stored, torch.Tensor):
            return self.stored * scale
        return self.stored.decode().mul_(scale)

    @property
    def by_rows(self) -> bool:
        """Whether `rows` and `take_rows` can read rows of x: y kept as it is, or compressed in
        groups `Compressed.by_rows` reads, and one scale per row (or one for all)."""
        exact = isinstance(self.stored, torch.Tensor)
        return (exact or self.stored.by_rows) and self.scale.dim() == 2 and self.scale.shape[1] == 1

    def _row_scales(self, rows: torch.Tensor | slice) -> torch.Tensor:
        """The clamped scales of `rows` (ids or a slice), as `decode` clamps them all."""
        if self.scale.shape[0] == 1:
            return self.scale.clamp_min(self.least)
        if isinstance(rows, slice):
            return self.scale[rows].clamp_min(self.least)
        return self.scale.index_select(0, rows).clamp_min_(self.least)

    def rows(self, start: int, stop: int) -> torch.Tensor | None:
        """Rows `start:stop` of `decode()`, the same bits, decoding only those rows (None when
        not `by_rows`, as `Compressed.rows`)."""
        if not self.by_rows:
            return None
        if isinstance(self.stored, torch.Tensor):
            return self.stored[start:stop] * self._row_scales(slice(start, stop))
        values = self.stored.rows(start, stop)
        return None if values is None else values.mul_(self._row_scales(slice(start, stop)))

    def take_rows(self, rows: torch.Tensor) -> torch.Tensor | None:
        """`decode()[rows]` with the same bits, decoding only those rows (None when not
        `by_rows`, as `Compressed.take_rows`)."""
        if not self.by_rows:
            return None
        if isinstance(self.stored, torch.Tensor):
            return self.stored.index_select(0, rows).mul_(self._row_scales(rows))
        return self.stored.take_rows(rows).mul_(self._row_scales(rows))

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.parts())

    def parts(self) -> tuple[torch.Tensor, ...]:
        stored = (self.stored,) if isinstance(self.stored, torch.Tensor) else self.stored.parts()
        return (*stored, self.scale)

    def meta(self) -> tuple[tuple | None, float]:
        exact = isinstance(self.stored, torch.Tensor)
        return (None if exact else self.stored.meta(), self.least)

    @classmethod
    def rebuild(cls, meta: tuple, parts: tuple[torch.Tensor, ...]) -> Rescaled:
        stored_meta, least = meta
        stored = parts[0] if stored_meta is None else Compressed.rebuild(stored_meta, parts[:-1])
        return cls(stored, parts[-1], least)


def worth_compressing(tensor: torch.Tensor, config: CompressionConfig) -> bool:
    """A float tensor of at least `min_numel` elements, with compression on."""
    return (
        config.enabled and tensor.is_floating_point() and tensor.numel() >= max(config.min_numel, 1)
    )


def _random_seed() -> int:
    # From torch's default generator, so `torch.manual_seed` makes runs reproducible.
    return int(torch.randint(0, 2**31 - 1, (), dtype=torch.int64))


def _compress(
    tensor: torch.Tensor,
    config: CompressionConfig,
    project: bool,
    exact_positives: bool,
    seed: int | None = None,
) -> Compressed:
    projection = None
    values = tensor.detach()
    if project and _projected_dim(values, config) is not None:
        projection = Projection(values.shape[-1], _random_seed())
        values = random_projection(values, config.projection_ratio, projection.seed)
    quantized = quantize(
        values,
        bits=config.bits,
        group_size=config.group_for(tuple(values.shape)),
        stochastic=config.stochastic,
        seed=seed,
        scheme=config.levels,
        # no device sync per saved tensor: a NaN activation still shows as a NaN loss, which the
        # trainer reports as divergence
        check_finite=False,
    )
    positive = PackedMask.positive(values) if exact_positives else None
    return Compressed(quantized, projection, positive, _live_rows(values, config))


def _live_rows(values: torch.Tensor, config: CompressionConfig) -> PackedMask | None:
    """The mask of rows not all zero, when groups span several rows and some row is all zero
    (see `Compressed`); None otherwise (nothing to keep)."""
    if values.dim() < 2 or values.shape[-1] == 0:
        return None
    group = config.group_for(tuple(values.shape))
    if group is None or group <= values.shape[-1]:
        return None  # one group per row (or less): a zero row quantizes to exact zeros
    live = live_rows(values)
    return None if live is None else PackedMask.pack(live)


def _compress_planned(
    tensor: torch.Tensor, config: CompressionConfig, project: bool, exact_positives: bool
) -> torch.Tensor | Compressed:
    """`_compress` at the width an applied `adaptive.WidthPlan` gives this site (`bits: auto`),
    the tensor itself when the plan keeps it exact; at `config`'s width when no plan applies."""
    width = sites.width_for(tensor, config.bits)
    if width is None:
        return _compress(tensor, config, project, exact_positives)
    if width == sites.EXACT:
        return tensor.detach()
    return _compress(
        tensor, config.at_width(width), project, exact_positives, sites.rounding_seed()
    )


@functools.cache
def _wider_configs(config: CompressionConfig) -> tuple[CompressionConfig, ...]:
    """The configs some ops save at instead of `config` (`for_normalized`, `for_scores`): a tensor
    already stored at one of them is reused, not stored a second time at fewer bits. Built once
    per config (this runs for every saved tensor)."""
    return tuple(config.at_least(bits) for bits in BITS if config.bits < bits < 32)


@functools.cache
def _kinds(
    config: CompressionConfig, project: bool, exact_positives: bool
) -> tuple[tuple, tuple, tuple[tuple, ...]]:
    """The scope-cache kinds `compress` uses for these settings: its own, that of its codes read
    as a flat view (`_view_twin`), and those of the wider configs (`_wider_configs`). Built once
    per settings (this runs for every saved tensor)."""
    kind = _kind(config, project, exact_positives)
    wider = tuple(_kind(c, project, exact_positives) for c in _wider_configs(config))
    return kind, ("view", kind), wider


def compress(
    tensor: torch.Tensor | None,
    config: CompressionConfig,
    *,
    project: bool = False,
    exact_positives: bool = False,
) -> torch.Tensor | Compressed | None:
    """`tensor` compressed per `config`, or the tensor itself when it is not worth compressing.

    Parameters and registered buffers are returned as they are: they are held anyway, so a
    quantized copy would cost time and accuracy and save nothing. Rows gathered from a parameter
    are stored as their indices (`gathered.Gathered`), exactly.

    `project=True` (linear inputs) applies the config's random projection first;
    `exact_positives=True` (ReLU outputs) also keeps a 1-bit mask of x > 0 (see `Compressed`). Inside a
    `compress_saved_tensors` or `ActivationMeter` block the same tensor version is compressed once,
    however many ops save it; one already stored wider (an L2-normalized output, kept at
    `normalize_bits`) serves the ops that save it at fewer bits.
    """
    if tensor is None or not config.enabled or stack.is_persistent(tensor):
        return tensor
    # the tensor's scope-cache key, made once for every lookup below
    key = stack.tensor_key(tensor) if stack.active() else None
    # rows of a parameter: their indices rebuild them exactly, at any size (a few rows kept as
    # they are would hold their whole gather's storage when they are a view of it)
    rows = gathered_rows(tensor, key=key) if tensor.is_floating_point() else None
    if rows is not None:
        return rows
    if not worth_compressing(tensor, config):
        return tensor
    # a projection that would keep every column is none: such a linear input shares the kind (and
    # the stored copy) of the same tensor saved by any other op
    project = project and _projected_dim(tensor, config) is not None
    kind, view_kind, wider = _kinds(config, project, exact_positives)
    # one key for every contiguous view of the same values (`_view_twin`)
    flat = (
        None if key is None or not tensor.is_contiguous() else stack.flat_key(key, tensor.numel())
    )

    def make(t: torch.Tensor) -> torch.Tensor | Compressed:
        twin = _view_twin(view_kind, t, flat, config)
        if twin is not None:
            return twin
        stored = _compress_planned(t, config, project, exact_positives)
        if isinstance(stored, Compressed) and flat is not None:
            stack.hold(view_kind, flat, t, stored)
        return stored

    # e.g. an L2-normalized output stored at 4 bits, then saved as a layer's input at 2 (`wider`)
    return stack.cached(kind, tensor, make, also=wider, key=key)


def _projected_dim(tensor: torch.Tensor, config: CompressionConfig) -> int | None:
    """The columns `config`'s random projection keeps of a linear input, or None when it would
    keep them all (no projection configured, or too few columns)."""
    if config.projection_ratio is None or tensor.dim() < 1:
        return None
    kept = math.ceil(tensor.shape[-1] / config.projection_ratio)
    return kept if kept < tensor.shape[-1] else None


def _view_twin(
    view_kind: tuple, tensor: torch.Tensor, flat: tuple | None, config: CompressionConfig
) -> Compressed | None:
    """The codes of a contiguous view of the same values in another shape, stored under
    `view_kind` at `flat` (this tensor's `stack.flat_key`, None when it is not contiguous) in this
    scope, read in this tensor's shape (KGCN's softmax weights, saved again by the product as
    `weights.unsqueeze(-1)`); None when there is none or its groups fall differently here."""
    if flat is None:
        return None
    twin = stack.lookup(view_kind, tensor, key=flat)
    return None if twin is None else twin.reshaped(tensor.shape, config)


def _kind(config: CompressionConfig, project: bool, exact_positives: bool) -> tuple:
    """The scope-cache kind of a tensor compressed with these settings."""
    return ("compress", config, project, exact_positives)


def offer_rescaled(
    tensor: torch.Tensor,
    scaled: torch.Tensor | Compressed | None,
    scale: torch.Tensor,
    least: float,
    config: CompressionConfig,
) -> None:
    """Let later ops that save `tensor` (= y * max(scale, least), y stored as `scaled` per `config`:
    compressed, or kept as it is) reuse `Rescaled(scaled, scale, least)` instead of storing `tensor`
    again: the output of an L2 normalization and its norms already hold its input, which KGAT's next
    layer saves. Offered whatever y's width, so the saves a step quantizes (the sites of
    `bits: auto`) are the same whichever widths they get."""
    plain = isinstance(scaled, torch.Tensor) and not stack.is_persistent(scaled)
    compressed = (
        isinstance(scaled, Compressed) and scaled.projection is None and scaled.positive is None
    )
    if plain or compressed:
        # held under the kind `compress(tensor, config)` looks up (unless a stored form is already)
        rescaled = Rescaled(scaled, scale, least)
        stack.cached(_kind(config, False, False), tensor, lambda _: rescaled)


def decompress(item: torch.Tensor | Compressed | None) -> torch.Tensor | None:
    """The tensor `compress` stored (dequantized, and unprojected when it was projected)."""
    return item if item is None or isinstance(item, torch.Tensor) else item.decode()
