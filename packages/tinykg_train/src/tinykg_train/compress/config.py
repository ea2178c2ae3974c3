"""CompressionConfig: how the activations autograd saves for backward are stored.

An immutable value passed explicitly to every op (`config=`) and to `compress_saved_tensors`; there is
no global setting. `bits=32` means no compression: every op is then the plain torch op.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from tinykg_train.compression_defaults import (
    BITS,
    DEFAULT_BITS,
    DEFAULT_NORMALIZE_BITS,
    DEFAULT_SCHEME,
    DEFAULT_SCORE_BITS,
    SCHEMES,
    check_scheme,
    check_width,
)
from tinykg_train.errors import ConfigError

__all__ = [
    "BITS",
    "DEFAULT_NORMALIZE_BITS",
    "DEFAULT_SCORE_BITS",
    "SCHEMES",
    "CompressionConfig",
]

# Tensors smaller than this are kept as they are: their codes would save little and the scales and
# the kernel launch would cost more than they save.
DEFAULT_MIN_NUMEL = 256

# 1-D tensors (per-edge weights) are quantized in blocks: one outlier spoils only its block.
DEFAULT_BLOCK_SIZE = 256
# Each group stores a 16-bit scale and zero point (32 bits). A group spans at least
# GROUP_CODE_BITS / bits elements, so those 32 bits are at most a quarter of its codes: 128 elements
# at 1 bit, 64 at 2, 32 at 4, 16 at 8. Rows narrower than that are grouped several whole rows at a
# time (a [N, 64] activation: one scale per row at 2 bits, per two rows at 1 bit).
GROUP_CODE_BITS = 128


@dataclass(frozen=True)
class CompressionConfig:
    """Bit width and grouping of saved activations.

    The valid widths and schemes and the defaults of `bits`, `scheme`, `score_bits` and
    `normalize_bits` come from `tinykg_train.compression_defaults`, shared with `TrainConfig`:
    `CompressionConfig()` equals `TrainConfig().compression_config()`.

    - `bits`: 1, 2, 4 or 8 (stochastic rounding, unbiased), or 32 for no compression.
    - `group_size`: None = one scale per row of the last dim for 2-D and larger activations
      (whole rows together when a row has fewer than `min_group_numel` elements; blocks of
      `DEFAULT_BLOCK_SIZE` for 1-D tensors); an integer = blocks of that many contiguous elements.
    - `scheme`: "uniform" levels, "normal" (2 bits only: the kernels' Gaussian-fitted levels), or
      "auto" (the default, as in `TrainConfig`): normal at 2 bits, uniform otherwise (at 2 bits
      normal levels train KGAT on music-kgcn to 0.983 of FP32 Recall@20 against 0.942 uniform,
      same bytes).
    - `projection_ratio`: if set (r > 1), linear layers save a random projection of their input to
      `ceil(in_features / r)` columns before quantizing (EXACT's D/R); the gradient stays unbiased.
    - `score_bits`: the least width of the final embeddings the loss's dot-product scores read
      (`for_scores`); 32 keeps them exact. Only ops given `for_scores()` use it.
    - `normalize_bits`: the least width of the outputs `ops.l2_normalize` saves
      (`for_normalized`); 32 keeps them exact.
    - `min_numel`: tensors with fewer elements are saved as they are (rows of a parameter are
      still saved as their indices).
    - `stochastic`: stochastic rounding (unbiased gradients); False rounds to nearest, which is
      biased (an ablation and the control of the unbiasedness tests).
    """

    bits: int = DEFAULT_BITS
    group_size: int | None = None
    scheme: str = DEFAULT_SCHEME
    projection_ratio: float | None = None
    min_numel: int = DEFAULT_MIN_NUMEL
    stochastic: bool = True
    score_bits: int = DEFAULT_SCORE_BITS
    normalize_bits: int = DEFAULT_NORMALIZE_BITS

    def __post_init__(self) -> None:
        check_width("bits", self.bits)
        if self.group_size is not None and (
            isinstance(self.group_size, bool)
            or not isinstance(self.group_size, int)
            or self.group_size <= 0
        ):
            raise ConfigError(
                f"'group_size' needs to be a positive integer or None (got {self.group_size!r})"
            )
        for name in ("score_bits", "normalize_bits"):
            check_width(name, getattr(self, name))
        check_scheme(self.scheme, self.bits)
        if self.projection_ratio is not None and not self.projection_ratio > 1:
            raise ConfigError(
                f"'projection_ratio' needs to be > 1 (columns kept: in_features / ratio) or None (got {self.projection_ratio!r})"
            )
        if (
            isinstance(self.min_numel, bool)
            or not isinstance(self.min_numel, int)
            or self.min_numel < 0
        ):
            raise ConfigError(f"'min_numel' needs to be an integer >= 0 (got {self.min_numel!r})")

    @property
    def levels(self) -> str:
        """The kernels' scheme for these bits: `scheme`, with "auto" resolved."""
        if self.scheme != "auto":
            return self.scheme
        return "normal" if self.bits == 2 else "uniform"

    def for_scores(self) -> CompressionConfig:
        """The config for the embeddings a loss scores: at least `score_bits` wide."""
        return self.at_least(self.score_bits)

    def for_normalized(self) -> CompressionConfig:
        """The config for the outputs an L2 normalization saves: at least `normalize_bits` wide."""
        return self.at_least(self.normalize_bits)

    def at_least(self, bits: int) -> CompressionConfig:
        """This config with its width raised to `bits` (an explicit "normal" scheme, which has 2-bit
        levels only, becomes "auto"); itself when compression is off or already that wide."""
        if not self.enabled or self.bits >= bits:
            return self
        return _widened(self, bits)

    def at_width(self, bits: int) -> CompressionConfig:
        """This config at exactly `bits` (1, 2, 4 or 8): what `bits: auto` stores a tensor at."""
        return self if bits == self.bits else _widened(self, bits)

    @property
    def enabled(self) -> bool:
        """True when saved activations are compressed (bits < 32)."""
        return self.bits < 32

    @property
    def min_group_numel(self) -> int:
        """Fewest elements per group: the group's 32 bits of scale and zero <= 1/4 of its codes."""
        return GROUP_CODE_BITS // min(self.bits, 8)

    def group_for(self, shape: tuple[int, ...]) -> int | None:
        """The kernels' `group_size` for a tensor of this shape (None = one group per row)."""
        if self.group_size is not None:
            return self.group_size
        if len(shape) < 2:
            return DEFAULT_BLOCK_SIZE
        width, least = shape[-1], self.min_group_numel
        if width == 0 or width >= least:
            return None
        return width * -(-least // width)  # whole rows, at least `least` elements


@functools.cache
def _widened(config: CompressionConfig, bits: int) -> CompressionConfig:
    """`config` at `bits` (built once per pair: ops ask for it at every saved tensor, and
    `dataclasses.replace` re-validates the whole config each time)."""
    scheme = "auto" if config.scheme == "normal" else config.scheme
    return replace(config, bits=bits, scheme=scheme)
