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

from tinykg_kernels import QuantizedTensor, dequantize, quantize, unproject
from tinykg_kernels import project as random_projection
from tinykg_train.compress import stack
from tinykg_train.compress.config import BITS, CompressionConfig
from tinykg_train.compress.gathered import gathered_rows
from tinykg_train.compress.masks import PackedMask


@dataclass(frozen=True)
class Projection:
    """A linear input stored as `project(x, ratio, seed)`: `dim` columns before projection."""

    dim: int
    seed: int


@dataclass(frozen=True)
class Compressed:
    """A float tensor stored quantized (after a random projection when `projection` is set).

    With `positive` (a `PackedMask` of x > 0, for ReLU outputs) the decoded values keep the exact
    sign pattern: zeros stay 0 and positives stay > 0 (a positive rounded down to 0 decodes as the
    smallest normal float, a bias of 1e-38), so a ReLU backward that reads `result > 0` is exact.
    """

    quantized: QuantizedTensor
    projection: Projection | None = None
    positive: PackedMask | None = None

    def decode(self) -> torch.Tensor:
        values = dequantize(self.quantized)
        if self.projection is not None:
            values = unproject(values, self.projection.dim, self.projection.seed)
        if self.positive is not None:
            tiny = torch.finfo(values.dtype).tiny
            # times the 1/0 mask rather than torch.where on the bool (7x slower on the CPU)
            values = values.clamp_min(tiny).mul_(self.positive.decode().to(values.dtype))
        return values

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.parts())

    def parts(self) -> tuple[torch.Tensor, ...]:
        mask = () if self.positive is None else self.positive.parts()
        return (*self.quantized.tensors(), *mask)

    def meta(self) -> tuple[Any, Projection | None, torch.Size | None]:
        mask = None if self.positive is None else self.positive.meta()
        return (self.quantized.meta, self.projection, mask)

    @classmethod
    def rebuild(cls, meta: tuple, parts: tuple[torch.Tensor, ...]) -> Compressed:
        quantized_meta, projection, mask_shape = meta
        quantized = QuantizedTensor.from_tensors(quantized_meta, parts[:3])
        positive = None if mask_shape is None else PackedMask.rebuild(mask_shape, parts[3:])
        return cls(quantized, projection, positive)


@dataclass(frozen=True)
class Rescaled:
    """A tensor x stored as a compressed y = x / max(scale, least) and the exact `scale` (broadcast
    against y): an L2 normalization's input, from the output and row norms it saves anyway
    (`offer_rescaled`; the norms are the same tensor, held once). Quantizing y rather than x gives
    every row the same range, however different their norms."""

    compressed: Compressed
    scale: torch.Tensor
    least: float = 0.0

    def decode(self) -> torch.Tensor:
        return self.compressed.decode().mul_(self.scale.clamp_min(self.least))

    @property
    def nbytes(self) -> int:
        return self.compressed.nbytes + self.scale.numel() * self.scale.element_size()

    def parts(self) -> tuple[torch.Tensor, ...]:
        return (*self.compressed.parts(), self.scale)

    def meta(self) -> tuple[tuple, float]:
        return (self.compressed.meta(), self.least)

    @classmethod
    def rebuild(cls, meta: tuple, parts: tuple[torch.Tensor, ...]) -> Rescaled:
        compressed_meta, least = meta
        return cls(Compressed.rebuild(compressed_meta, parts[:-1]), parts[-1], least)


def worth_compressing(tensor: torch.Tensor, config: CompressionConfig) -> bool:
    """A float tensor of at least `min_numel` elements, with compression on."""
    return (
        config.enabled and tensor.is_floating_point() and tensor.numel() >= max(config.min_numel, 1)
    )


def _random_seed() -> int:
    # From torch's default generator, so `torch.manual_seed` makes runs reproducible.
    return int(torch.randint(0, 2**31 - 1, (), dtype=torch.int64))


def _compress(
    tensor: torch.Tensor, config: CompressionConfig, project: bool, exact_positives: bool
) -> Compressed:
    projection = None
    values = tensor.detach()
    if project and config.projection_ratio is not None and values.dim() >= 1:
        dim = values.shape[-1]
        if math.ceil(dim / config.projection_ratio) < dim:
            projection = Projection(dim, _random_seed())
            values = random_projection(values, config.projection_ratio, projection.seed)
    quantized = quantize(
        values,
        bits=config.bits,
        group_size=config.group_for(tuple(values.shape)),
        stochastic=config.stochastic,
        seed=None,
        scheme=config.levels,
        # no device sync per saved tensor: a NaN activation still shows as a NaN loss, which the
        # trainer reports as divergence
        check_finite=False,
    )
    positive = PackedMask.positive(values) if exact_positives else None
    return Compressed(quantized, projection, positive)


@functools.cache
def _wider_configs(config: CompressionConfig) -> tuple[CompressionConfig, ...]:
    """The configs some ops save at instead of `config` (`for_normalized`, `for_scores`): a tensor
    already stored at one of them is reused, not stored a second time at fewer bits. Built once
    per config (this runs for every saved tensor)."""
    return tuple(config.at_least(bits) for bits in BITS if config.bits < bits < 32)


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
    if tensor is None or not worth_compressing(tensor, config) or stack.is_persistent(tensor):
        return tensor
    rows = gathered_rows(tensor)
    if rows is not None:  # rows of a parameter: their indices rebuild them exactly
        return rows
    return stack.cached(
        _kind(config, project, exact_positives),
        tensor,
        lambda t: _compress(t, config, project, exact_positives),
        # e.g. an L2-normalized output stored at 4 bits, then saved as a layer's input at 2
        also=[_kind(wider, project, exact_positives) for wider in _wider_configs(config)],
    )


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
    """Let later ops that save `tensor` (= y * max(scale, least), y compressed as `scaled` per
    `config`) reuse `Rescaled(scaled, scale, least)` instead of storing `tensor` again: the output
    of an L2 normalization and its norms already hold its input, which KGAT's next layer saves."""
    if isinstance(scaled, Compressed) and scaled.projection is None and scaled.positive is None:
        # held under the kind `compress(tensor, config)` looks up (unless a stored form is already)
        rescaled = Rescaled(scaled, scale, least)
        stack.cached(_kind(config, False, False), tensor, lambda _: rescaled)


def decompress(item: torch.Tensor | Compressed | None) -> torch.Tensor | None:
    """The tensor `compress` stored (dequantized, and unprojected when it was projected)."""
    return item if item is None or isinstance(item, torch.Tensor) else item.decode()
