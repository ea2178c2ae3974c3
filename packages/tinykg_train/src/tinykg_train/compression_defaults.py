"""The valid bit widths and level schemes of compressed activations, and their defaults: one source.

`TrainConfig` (torch-free), `CompressionConfig`, `pipelines.train --help` and the sweep spec all read
these, so the library and the command line cannot drift apart (a test compares them). This module
imports nothing but the errors: `tinykg_train.config` must stay free of torch.
"""

from __future__ import annotations

from typing import Any

from tinykg_train.errors import ConfigError

#: Bits per stored element; 32 means no compression.
BITS = (1, 2, 4, 8, 32)
#: Quantization levels: "uniform", "normal" (2 bits only: the kernels' Gaussian-fitted levels) or
#: "auto" (normal at 2 bits, uniform otherwise).
SCHEMES = ("uniform", "normal", "auto")

#: Width of a run or a CompressionConfig that names none: no compression.
DEFAULT_BITS = 32
#: "auto": at 2 bits the normal levels train KGAT on music-kgcn to 0.983 of FP32 Recall@20 against
#: 0.942 with uniform levels, for the same bytes (README, section accuracy-cpu-int2-normal-levels).
DEFAULT_SCHEME = "auto"

# Two kinds of saved tensors get more bits than `bits` by default: at 2 bits they are where most of
# a KGAT step's gradient error comes from (music-kgcn, one CF step, gradient error relative to the
# exact gradient: 0.39 with everything at 2 bits, 0.25 with either kind wider, 0.05 with both;
# BENCHMARKS.md section gradient-error-kgat).
# - The final embeddings whose dot products are the BPR scores: every gradient of a step starts from
#   them.
# - The outputs an L2 normalization saves: its backward is quadratic in them.
# KGAT on music-kgcn over ten seeds, INT2 / FP32 Recall@20: 0.973 with both at 2 bits, 0.984 with
# the scored embeddings at 8, 1.005 with both (10.6x less activation memory, dropout on).
DEFAULT_SCORE_BITS = 8
DEFAULT_NORMALIZE_BITS = 4

#: What `keep` means for each width setting, for the messages below.
_WIDTH_NOTES = {
    "bits": "32 means no compression",
    "score_bits": "32 keeps those tensors exact",
    "normalize_bits": "32 keeps those tensors exact",
}


def check_width(name: str, value: Any, *, allow_auto: bool = False) -> None:
    """Raise a one-line ConfigError unless `value` is a valid width for setting `name` (with
    `allow_auto`, the message names `auto` too: a run's `bits` may be auto)."""
    if isinstance(value, bool) or value not in BITS:
        note = _WIDTH_NOTES.get(name, "32 means uncompressed")
        choices = ", ".join(map(str, BITS)) + (" or auto" if allow_auto else "")
        raise ConfigError(f"'{name}' must be one of {choices} (got {value!r}); {note}")


def check_scheme(value: Any, bits: int | None = None) -> None:
    """Raise a one-line ConfigError unless `value` is a scheme (and, given `bits`, usable at it)."""
    if value not in SCHEMES:
        raise ConfigError(f"'scheme' must be one of {', '.join(SCHEMES)} (got {value!r})")
    if value == "normal" and bits is not None and bits not in (2, 32):
        raise ConfigError(
            f"scheme 'normal' has 2-bit levels only (got bits={bits}): use bits=2 or scheme 'uniform'"
        )


def width_label(bits: int | str) -> str:
    """How a width is named in summaries, run names and charts: "fp32" for 32 bits, "auto" for
    `bits: auto`, else "int<bits>"."""
    return "fp32" if bits == 32 else "auto" if bits == "auto" else f"int{bits}"
