# ruff: noqa: SIM108  (constexpr branches inside kernels read better as if-statements)
"""Triton kernels for the codec of `reference.py`, and their launchers.

- `_quantize_kernel`: one fused pass per block of groups: load, min/max, directed-rounded zero
  point and scale, noise, codes, packing, store. A group longer than one tile (`SINGLE_CHUNK` off)
  is read twice: once for min/max, once to encode.
- `_dequantize_kernel`: unpack and `zero + level * scale`, stored in the output dtype.

Every float step is the IEEE float32 operation `reference.py` performs (precise division, no FMA
contraction: launches pass `enable_fp_fusion=False`), so with the same noise both give the same
bits. 16-bit parameters, bfloat16 inputs and bfloat16 outputs go through `triton_bits` (integer bit
arithmetic), because the interpreter's float casts differ from a GPU's.

Noise: `NOISE=0` rounds to nearest (u = 1/2); `NOISE=1` draws Philox (`tl.randint4x`: one call
per 4 consecutive codes of a group, keyed by `seed` and the group's position, so the draws do not
depend on block sizes); `NOISE=2` reads a noise tensor (tests feed both backends the same noise).

Tiles are `[BLOCK_R groups, BLOCK_C codes]`; packing reshapes the codes to `[.., bytes, codes per
byte]` and sums the shifted codes over the last axis. When tiles cover the groups exactly
(`MASKED` off, e.g. `[N, 64]` rows) no load or store carries a mask.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from tinykg_kernels.levels import interval_constants
from tinykg_kernels.packing import GroupLayout
from tinykg_kernels.triton_bits import (
    bf16_bits_nearest,
    is_finite,
    load_param,
    round_param,
    store_param,
)

PARAM_CODES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
PHILOX_ROUNDS = 7  # Philox-4x32-7 passes TestU01 BigCrush (Salmon et al., SC'11); 10 is the default
SMALLEST_NORMAL = tl.constexpr(1.1754943508222875e-38)  # keeps 1 / scale finite

# fmt: off
# ---------------------------------------------------------------- quantize


@triton.jit
def _nan_min(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _nan_max(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _tile_offsets(rows64, row_ok, chunk, group_len, numel,
                  BLOCK_C: tl.constexpr, MASKED: tl.constexpr):
    """Flat offsets of a `[BLOCK_R, BLOCK_C]` tile (columns of chunk `chunk` of each group) and,
    when MASKED, which of them are real elements (unmasked tiles are all real)."""
    cols = chunk * BLOCK_C + tl.arange(0, BLOCK_C)
    offs = rows64[:, None] * group_len + cols[None, :]
    if MASKED:
        valid = row_ok[:, None] & (cols < group_len)[None, :] & (offs < numel)
    else:
        valid = row_ok[:, None]  # placeholder, never read
    return offs, valid


@triton.jit
def _load_tile(x_ptr, offs, valid, X_BF16: tl.constexpr, MASKED: tl.constexpr):
    """x of a tile as float32 (bfloat16 is read as its bits: exact in the interpreter too)."""
    if MASKED:
        raw = tl.load(x_ptr + offs, mask=valid, other=0)
    else:
        raw = tl.load(x_ptr + offs)
    if X_BF16:
        return (raw.to(tl.int32) << 16).to(tl.float32, bitcast=True)
    return raw.to(tl.float32)


@triton.jit
def _row_min_max(low, high, INTERPRETER: tl.constexpr):
    """Row-wise min of `low` and max of `high`, either one NaN when the row holds a NaN.

    On a GPU: a NaN-propagating reduction (one `min.NaN` per element). The interpreter runs a custom
    combine function element by element in Python, and its own `tl.min` skips NaN, so there NaN is
    first mapped to -inf (min) and +inf (max): the row is flagged bad either way.
    """
    if INTERPRETER:
        low = tl.min(tl.where(low != low, float("-inf"), low), 1)
        high = tl.max(tl.where(high != high, float("inf"), high), 1)
    else:
        low = tl.reduce(low, 1, _nan_min)
        high = tl.reduce(high, 1, _nan_max)
    return low, high


@triton.jit
def _tile_min_max(x, valid, row_ok, MASKED: tl.constexpr, INTERPRETER: tl.constexpr):
    """Per-row min and max of a tile (see `_row_min_max`). Rows past the last group get 0 and 0,
    so their (never stored) arithmetic stays finite."""
    if MASKED:
        low, high = _row_min_max(tl.where(valid, x, float("inf")), tl.where(valid, x, float("-inf")),
                                 INTERPRETER)
        return tl.where(row_ok, low, 0.0), tl.where(row_ok, high, 0.0)
    else:
        return _row_min_max(x, x, INTERPRETER)


@triton.jit
def _philox_noise(seed, rows64, chunk, quads_per_group,
                  BLOCK_C: tl.constexpr, ROUNDS: tl.constexpr):
    """Uniform (0, 1) noise for a tile: one Philox call per 4 consecutive codes of a group.

    Code `c` of group `g` takes the top 23 bits of word `c % 4` of the call at counter
    `g * quads_per_group + c // 4` (so the draws do not depend on block sizes), mid-cell:
    `(m + 1/2) / 2**23`, whose mean is exactly 1/2.
    """
    QUADS: tl.constexpr = BLOCK_C // 4
    quad = chunk * QUADS + tl.arange(0, QUADS)
    counters = rows64[:, None] * quads_per_group + quad[None, :]
    r0, r1, r2, r3 = tl.randint4x(seed, counters, ROUNDS)
    # join adds a minor axis: element [j, i] of this join is r_(2j + i)
    words = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), (r0.shape[0], BLOCK_C))
    return ((words.to(tl.uint32, bitcast=True) >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)


@triton.jit
def _tile_noise(noise_ptr, offs, valid, seed, rows64, chunk, quads_per_group,
                NOISE: tl.constexpr, BLOCK_C: tl.constexpr, ROUNDS: tl.constexpr,
                MASKED: tl.constexpr):
    """Uniform noise in [0, 1) per element of the tile (1/2 when rounding to nearest)."""
    if NOISE == 0:
        return 0.5
    elif NOISE == 1:
        return _philox_noise(seed, rows64, chunk, quads_per_group, BLOCK_C, ROUNDS)
    elif MASKED:
        return tl.load(noise_ptr + offs, mask=valid, other=0.5)
    else:
        return tl.load(noise_ptr + offs)


@triton.jit
def _encode_tile(x, u, zero, inverse, valid,
                 MAX_CODE: tl.constexpr, NORMAL: tl.constexpr, MASKED: tl.constexpr,
                 LEVEL1: tl.constexpr, LEVEL2: tl.constexpr,
                 INV_W0: tl.constexpr, INV_W1: tl.constexpr, INV_W2: tl.constexpr):
    """int32 codes of a tile: 0 where invalid; garbage in bad rows, which `_pack_store` zeroes."""
    t = (x - zero[:, None]) * inverse[:, None]
    if NORMAL:
        lower = (t >= LEVEL1).to(tl.int32) + (t >= LEVEL2).to(tl.int32)
        base = tl.where(lower == 0, 0.0, tl.where(lower == 1, LEVEL1, LEVEL2))
        inv_width = tl.where(lower == 0, INV_W0, tl.where(lower == 1, INV_W1, INV_W2))
        code = lower + (u < (t - base) * inv_width).to(tl.int32)
    else:
        # t >= 0 (x >= min >= zero), so truncation is floor; the clamp catches t a hair above
        # MAX_CODE from float rounding: floor(min(t + u, M + 1/2)) == min(floor(t + u), M)
        code = tl.minimum(t + u, MAX_CODE + 0.5).to(tl.int32)
    if MASKED:
        code = tl.where(valid, code, 0)
    return code


@triton.jit
def _pack_store(codes_ptr, code, bad, rows64, row_ok, chunk, bytes_per_group,
                BITS: tl.constexpr, BLOCK_C: tl.constexpr, MASKED: tl.constexpr):
    """OR each byte's codes together (first code in the low bits) and store the bytes."""
    PER_BYTE: tl.constexpr = 8 // BITS
    BLOCK_B: tl.constexpr = BLOCK_C // PER_BYTE
    fields = tl.reshape(code, (code.shape[0], BLOCK_B, PER_BYTE))
    shifts = tl.arange(0, PER_BYTE) * BITS
    packed = tl.sum(fields << shifts[None, None, :], axis=2)
    packed = tl.where(bad[:, None], 0, packed).to(tl.uint8)
    byte_idx = chunk * BLOCK_B + tl.arange(0, BLOCK_B)
    ptrs = codes_ptr + rows64[:, None] * bytes_per_group + byte_idx[None, :]
    if MASKED:
        tl.store(ptrs, packed, mask=row_ok[:, None] & (byte_idx < bytes_per_group)[None, :])
    else:
        tl.store(ptrs, packed)


@triton.jit(do_not_specialize=["seed"])  # a new seed per call must not mean a new compile
def _quantize_kernel(
    x_ptr, noise_ptr, codes_ptr, scale_ptr, zero_ptr,
    numel, n_groups, group_len, bytes_per_group, quads_per_group, n_chunks, seed,
    BITS: tl.constexpr, PARAM: tl.constexpr, NOISE: tl.constexpr, X_BF16: tl.constexpr,
    NORMAL: tl.constexpr, LEVEL1: tl.constexpr, LEVEL2: tl.constexpr,
    INV_W0: tl.constexpr, INV_W1: tl.constexpr, INV_W2: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, SINGLE_CHUNK: tl.constexpr,
    MASKED: tl.constexpr, ROUNDS: tl.constexpr, INTERPRETER: tl.constexpr,
):
    MAX_CODE: tl.constexpr = (1 << BITS) - 1
    if NORMAL:
        STEPS: tl.constexpr = 1  # the normal levels live on [0, 1]
    else:
        STEPS: tl.constexpr = MAX_CODE
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_groups
    rows64 = rows.to(tl.int64)

    # pass 1: min and max per group (a group that fits in one chunk stays in registers)
    if SINGLE_CHUNK:
        offs, valid = _tile_offsets(rows64, row_ok, 0, group_len, numel, BLOCK_C, MASKED)
        x = _load_tile(x_ptr, offs, valid, X_BF16, MASKED)
        lo, hi = _tile_min_max(x, valid, row_ok, MASKED, INTERPRETER)
    else:
        lo = tl.full((BLOCK_R,), float("inf"), tl.float32)
        hi = tl.full((BLOCK_R,), float("-inf"), tl.float32)
        for chunk in range(0, n_chunks):
            offs_c, valid_c = _tile_offsets(rows64, row_ok, chunk, group_len, numel, BLOCK_C, MASKED)
            lo_c, hi_c = _tile_min_max(_load_tile(x_ptr, offs_c, valid_c, X_BF16, MASKED),
                                       valid_c, row_ok, MASKED, INTERPRETER)
            lo = tl.minimum(lo, lo_c, propagate_nan=tl.PropagateNan.ALL)
            hi = tl.maximum(hi, hi_c, propagate_nan=tl.PropagateNan.ALL)

    # stored parameters: zero rounded down, scale rounded up; NaN for bad groups
    zero_bits, zero = round_param(lo, False, PARAM)
    raw = (hi - zero) * (1.0 / STEPS)
    raw = tl.where(raw > 0, tl.maximum(raw, SMALLEST_NORMAL), 0.0)
    scale_bits, scale = round_param(raw, True, PARAM)
    # NaN reaches both min and max; +-inf makes zero or scale infinite; so these two suffice
    bad = ~(is_finite(zero) & is_finite(scale))
    store_param(scale_ptr, rows64, row_ok, scale_bits, bad, PARAM)
    store_param(zero_ptr, rows64, row_ok, zero_bits, bad, PARAM)
    positive = scale > 0
    ones = tl.full(scale.shape, 1.0, tl.float32)
    inverse = tl.where(positive, tl.math.div_rn(ones, tl.where(positive, scale, ones)), 0.0)

    # pass 2: noise, codes, packing
    if SINGLE_CHUNK:
        u = _tile_noise(noise_ptr, offs, valid, seed, rows64, 0, quads_per_group,
                        NOISE, BLOCK_C, ROUNDS, MASKED)
        code = _encode_tile(x, u, zero, inverse, valid, MAX_CODE, NORMAL, MASKED,
                            LEVEL1, LEVEL2, INV_W0, INV_W1, INV_W2)
        _pack_store(codes_ptr, code, bad, rows64, row_ok, 0, bytes_per_group, BITS, BLOCK_C, MASKED)
    else:
        for chunk in range(0, n_chunks):
            offs_c, valid_c = _tile_offsets(rows64, row_ok, chunk, group_len, numel, BLOCK_C, MASKED)
            xc = _load_tile(x_ptr, offs_c, valid_c, X_BF16, MASKED)
            u = _tile_noise(noise_ptr, offs_c, valid_c, seed, rows64, chunk, quads_per_group,
                            NOISE, BLOCK_C, ROUNDS, MASKED)
            code = _encode_tile(xc, u, zero, inverse, valid_c, MAX_CODE, NORMAL, MASKED,
                                LEVEL1, LEVEL2, INV_W0, INV_W1, INV_W2)
            _pack_store(codes_ptr, code, bad, rows64, row_ok, chunk, bytes_per_group,
                        BITS, BLOCK_C, MASKED)


# ---------------------------------------------------------------- dequantize


@triton.jit
def _dequantize_kernel(
    codes_ptr, scale_ptr, zero_ptr, out_ptr,
    numel, n_groups, group_len, bytes_per_group, n_chunks,
    BITS: tl.constexpr, PARAM: tl.constexpr, OUT_BF16: tl.constexpr,
    NORMAL: tl.constexpr, LEVEL1: tl.constexpr, LEVEL2: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, MASKED: tl.constexpr,
):
    PER_BYTE: tl.constexpr = 8 // BITS
    BLOCK_B: tl.constexpr = BLOCK_C // PER_BYTE
    MAX_CODE: tl.constexpr = (1 << BITS) - 1
    pid = tl.program_id(0)
    chunk = pid % n_chunks
    rows = (pid // n_chunks) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_groups
    rows64 = rows.to(tl.int64)

    byte_idx = chunk * BLOCK_B + tl.arange(0, BLOCK_B)
    byte_ptrs = codes_ptr + rows64[:, None] * bytes_per_group + byte_idx[None, :]
    if MASKED:
        packed = tl.load(byte_ptrs, mask=row_ok[:, None] & (byte_idx < bytes_per_group)[None, :],
                         other=0)
    else:
        packed = tl.load(byte_ptrs)
    shifts = tl.arange(0, PER_BYTE) * BITS
    fields = (packed.to(tl.int32)[:, :, None] >> shifts[None, None, :]) & MAX_CODE
    code = tl.reshape(fields, (BLOCK_R, BLOCK_C))
    if NORMAL:
        level = tl.where(code == 0, 0.0,
                         tl.where(code == 1, LEVEL1, tl.where(code == 2, LEVEL2, 1.0)))
    else:
        level = code.to(tl.float32)
    scale = load_param(scale_ptr, rows64, row_ok, PARAM)
    zero = load_param(zero_ptr, rows64, row_ok, PARAM)
    value = zero[:, None] + level * scale[:, None]
    if OUT_BF16:
        value = bf16_bits_nearest(value).to(tl.int16)
    else:
        value = value.to(out_ptr.dtype.element_ty)

    offs, valid = _tile_offsets(rows64, row_ok, chunk, group_len, numel, BLOCK_C, MASKED)
    if MASKED:
        tl.store(out_ptr + offs, value, mask=valid)
    else:
        tl.store(out_ptr + offs, value)


# fmt: on
# ---------------------------------------------------------------- launchers

INTERPRETED = type(_quantize_kernel).__name__ == "InterpretedFunction"
# Elements per program. The interpreter's cost grows with the number of programs, so it gets big
# tiles; on a GPU, ~4K elements per program (16 KB of float32) keeps loads wide and SMs busy.
TILE_ELEMENTS = 1 << 16 if INTERPRETED else 4096
MAX_CHUNK_COLUMNS = 1 << 16 if INTERPRETED else 4096
NUM_WARPS = 4


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _next_power_of_2(n: int) -> int:
    """Smallest power of two >= `n` (n >= 1). Plain Python on purpose: `triton.cdiv` and
    `triton.next_power_of_2` are constexpr functions costing ~5 us per host call, every launch."""
    return 1 << (n - 1).bit_length()


def _tile(layout: GroupLayout) -> tuple[int, int]:
    """(BLOCK_R groups, BLOCK_C codes) per program: powers of two, one group's chunk per row."""
    # at least 4 columns: a tile row holds whole Philox quads
    columns = max(_next_power_of_2(layout.group_len), layout.per_byte, 4)
    columns = min(columns, MAX_CHUNK_COLUMNS)
    rows = max(1, min(TILE_ELEMENTS // columns, _next_power_of_2(layout.n_groups)))
    return rows, columns


def _needs_mask(layout: GroupLayout, block_r: int, block_c: int) -> bool:
    """False when tiles cover the groups exactly (whole rows, whole tiles): no masks in the kernel."""
    whole_tiles = layout.n_groups % block_r == 0 and layout.group_len % block_c == 0
    exact = (
        layout.padded_len == layout.group_len and layout.numel == layout.n_groups * layout.group_len
    )
    return not (whole_tiles and exact)


def _bits_view(t: torch.Tensor) -> torch.Tensor:
    """bfloat16 tensors are handed to the kernels as int16 bit patterns (see the module docstring)."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def _param_view(t: torch.Tensor) -> torch.Tensor:
    """16-bit parameters are read and written as int16 bit patterns."""
    return t if t.dtype == torch.float32 else t.view(torch.int16)


def _level_constants(scheme: str, layout: GroupLayout) -> dict[str, object]:
    """The `normal` scheme's inner levels (dummies for `uniform`), as kernel constants."""
    levels = interval_constants(layout.group_len)[0] if scheme == "normal" else (0.0, 0.0, 0.0, 1.0)
    return {"NORMAL": scheme == "normal", "LEVEL1": levels[1], "LEVEL2": levels[2]}


def _inverse_width_constants(scheme: str, layout: GroupLayout) -> dict[str, float]:
    widths = interval_constants(layout.group_len)[1] if scheme == "normal" else (1.0, 1.0, 1.0)
    return {"INV_W0": widths[0], "INV_W1": widths[1], "INV_W2": widths[2]}


class Launch(NamedTuple):
    """One kernel call: what a launcher passes to `kernel[grid](*args, **constants)`."""

    kernel: object
    grid: tuple[int, ...]
    args: tuple[object, ...]
    constants: dict[str, object]

    def run(self) -> None:
        """Launch on the device of the first tensor (Triton launches on the current device; the
        device is switched only when it is another: the switch costs more host time than some
        launches)."""
        device = next(a.device for a in self.args if isinstance(a, torch.Tensor))
        another_gpu = device.type == "cuda" and device.index != torch.cuda.current_device()
        with torch.cuda.device(device) if another_gpu else contextlib.nullcontext():
            self.kernel[self.grid](
                *self.args, **self.constants, num_warps=NUM_WARPS, enable_fp_fusion=False
            )


def quantize_launch(
    flat: torch.Tensor,
    layout: GroupLayout,
    scheme: str,
    param_dtype: torch.dtype,
    outputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    seed: int | None = None,
    noise: torch.Tensor | None = None,
) -> Launch:
    """The `_quantize_kernel` call that fills `outputs` = (codes, scale, zero) from `flat`."""
    codes, scale, zero = outputs
    mode = 2 if noise is not None else (1 if seed is not None else 0)
    block_r, block_c = _tile(layout)
    n_chunks = _cdiv(layout.group_len, block_c)
    args = (
        _bits_view(flat), flat if noise is None else noise, codes, _param_view(scale), _param_view(zero),
        layout.numel, layout.n_groups, layout.group_len, layout.bytes_per_group,
        -(-layout.padded_len // 4), n_chunks, seed if mode == 1 else 0,
    )  # fmt: skip
    constants = {
        "BITS": layout.bits,
        "PARAM": PARAM_CODES[param_dtype],
        "NOISE": mode,
        "X_BF16": flat.dtype == torch.bfloat16,
        **_level_constants(scheme, layout),
        **_inverse_width_constants(scheme, layout),
        "BLOCK_R": block_r,
        "BLOCK_C": block_c,
        "SINGLE_CHUNK": n_chunks == 1,
        "MASKED": _needs_mask(layout, block_r, block_c),
        "ROUNDS": PHILOX_ROUNDS,
        "INTERPRETER": INTERPRETED,
    }
    return Launch(_quantize_kernel, (_cdiv(layout.n_groups, block_r),), args, constants)


def dequantize_launch(
    codes: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    layout: GroupLayout,
    scheme: str,
    out: torch.Tensor,
) -> Launch:
    """The `_dequantize_kernel` call that fills the flat `out` from (codes, scale, zero)."""
    block_r, block_c = _tile(layout)
    n_chunks = _cdiv(layout.group_len, block_c)
    args = (
        codes, _param_view(scale), _param_view(zero), _bits_view(out),
        layout.numel, layout.n_groups, layout.group_len, layout.bytes_per_group, n_chunks,
    )  # fmt: skip
    constants = {
        "BITS": layout.bits,
        "PARAM": PARAM_CODES[scale.dtype],
        "OUT_BF16": out.dtype == torch.bfloat16,
        **_level_constants(scheme, layout),
        "BLOCK_R": block_r,
        "BLOCK_C": block_c,
        "MASKED": _needs_mask(layout, block_r, block_c),
    }
    grid = (_cdiv(layout.n_groups, block_r) * n_chunks,)
    return Launch(_dequantize_kernel, grid, args, constants)


def quantize(
    flat: torch.Tensor,
    layout: GroupLayout,
    scheme: str,
    param_dtype: torch.dtype,
    seed: int | None = None,
    noise: torch.Tensor | None = None,
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flat contiguous tensor -> (codes, scale, zero), as `reference.quantize`.

    Noise: `noise` (float32, `numel` long) if given, else Philox from `seed`, else round to nearest.
    `out`: preallocated (codes, scale, zero) to write into (tests pre-fill them with garbage).
    """
    if out is None:
        device = flat.device
        out = (
            torch.empty(
                (layout.n_groups, layout.bytes_per_group), dtype=torch.uint8, device=device
            ),
            torch.empty(layout.n_groups, dtype=param_dtype, device=device),
            torch.empty(layout.n_groups, dtype=param_dtype, device=device),
        )
    if layout.numel:
        quantize_launch(flat, layout, scheme, param_dtype, out, seed, noise).run()
    return out


def dequantize(
    codes: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    layout: GroupLayout,
    scheme: str,
    dtype: torch.dtype,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """(codes, scale, zero) -> flat tensor of `numel` values in `dtype`, as `reference.dequantize`."""
    if out is None:
        out = torch.empty(layout.numel, dtype=dtype, device=codes.device)
    if layout.numel:
        dequantize_launch(codes, scale, zero, layout, scheme, out).run()
    return out
