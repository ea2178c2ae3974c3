"""The codec in plain torch: the CPU path and the oracle the Triton kernels are tested against.

Per group (see `packing.GroupLayout`), in float32:

1. `lo, hi` = min and max of the group.
2. `zero` = `lo` rounded DOWN to the parameter dtype; `scale` = `(hi - zero) * float32(1 / steps)`
   rounded UP (`steps` = 2**bits - 1 for `uniform`, 1 for `normal`, whose levels live on [0, 1]),
   at least the smallest normal float32 when positive. So every value lies in
   `[zero, zero + steps * scale]` with the parameters AS STORED (up to one float32 rounding, which
   the clamp of the top code absorbs), and rounding against them stays unbiased.
3. `t = (x - zero) * (1 / scale)` (0 when `scale == 0`: constant groups give code 0 and come back
   as `zero`, exactly, whenever their value is representable in the parameter dtype).
4. uniform: `code = clamp(floor(t + u), 0, steps)`; normal: with `t` between levels `l_i` and
   `l_{i+1}`, `code = i + (u < (t - l_i) / (l_{i+1} - l_i))`. `u` is uniform noise in [0, 1)
   (`stochastic=True`: P(up) equals the distance to the lower level, so E[code] is exact) or 0.5
   (round to nearest).
5. A group holding NaN/Inf, or whose parameters overflow the parameter dtype, gets NaN parameters
   and codes 0: it dequantizes to NaN (`api.quantize` raises before that unless told not to).

Dequantize: `zero + code * scale` (uniform) or `zero + level[code] * scale` (normal), cast to the
output dtype. Every step above is an IEEE float32 operation, so the Triton kernels reproduce it bit
for bit given the same noise.
"""

from __future__ import annotations

import functools

import torch

from tinykg_kernels.levels import interval_constants
from tinykg_kernels.packing import GroupLayout, pack_codes, unpack_codes

PARAM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
SMALLEST_NORMAL = torch.finfo(torch.float32).tiny  # keeps 1 / scale finite


def steps_for(scheme: str, layout: GroupLayout) -> int:
    """How many scales fit between `zero` and the group max: the top code (uniform), 1 (normal)."""
    return layout.max_code if scheme == "uniform" else 1


def _next_toward(r: torch.Tensor, up: bool) -> torch.Tensor:
    """The neighbouring value of each 16-bit float `r`, towards +inf (`up`) or -inf."""
    bits = r.view(torch.int16)
    away_from_zero = (r > 0) if up else (r < 0)
    stepped = torch.where(away_from_zero, bits + 1, bits - 1)
    # from +-0 the neighbour is the smallest subnormal of the sign we move towards (bits 0x0001, 0x8001)
    stepped = torch.where(r == 0, 0x0001 if up else -0x7FFF, stepped)
    return stepped.view(r.dtype)


def round_directed(v: torch.Tensor, dtype: torch.dtype, up: bool) -> torch.Tensor:
    """float32 `v` -> `dtype`, rounded towards +inf (`up`) or -inf: the stored value never crosses `v`.

    Overflow goes to +-inf only in the rounding direction (down from a huge positive value gives the
    largest finite one). NaN stays NaN.
    """
    return _round_directed_float32(v, dtype, up).to(dtype)


def _round_directed_float32(v: torch.Tensor, dtype: torch.dtype, up: bool) -> torch.Tensor:
    """`round_directed` kept in float32 (the value is exact in `dtype`)."""
    if dtype == torch.float32:
        return v.clone()
    if dtype == torch.bfloat16:
        return _round_directed_bfloat16_bits(v, up)
    return round_directed_by_conversion(v, dtype, up).float()


_BFLOAT16_DROPPED = 0xFFFF  # the low 16 bits of a float32 that bfloat16 drops
_BFLOAT16_KEPT = -0x10000  # 0xFFFF0000 as an int32


def _round_directed_bfloat16_bits(v: torch.Tensor, up: bool) -> torch.Tensor:
    """`round_directed` to bfloat16 on the float32 bits, as float32: bfloat16 is the top half of a
    float32, so dropping the low half rounds towards zero, and adding 0xFFFF first rounds away from
    zero (a carry into the exponent gives the next binade, or inf past the largest finite value).

    Integer operations only, so it vectorizes inside the compiled quantize loop (the conversion
    route is ~10 scalar float conversions per group there). Equal to `round_directed_by_conversion`
    for every float32 (tested), NaN included.
    """
    bits = v.view(torch.int32)
    towards_zero = bits & _BFLOAT16_KEPT
    away_from_zero = (bits + _BFLOAT16_DROPPED) & _BFLOAT16_KEPT
    # up: positives move away from zero, negatives towards it; down: the other way round
    positive_way, negative_way = (
        (away_from_zero, towards_zero) if up else (towards_zero, away_from_zero)
    )
    rounded = torch.where(bits < 0, negative_way, positive_way)
    return torch.where(torch.isnan(v), v, rounded.view(torch.float32))


def round_directed_by_conversion(v: torch.Tensor, dtype: torch.dtype, up: bool) -> torch.Tensor:
    """`round_directed` for a 16-bit `dtype` through a round-to-nearest conversion and one step
    back when it crossed `v` (any 16-bit float format; the bfloat16 path is checked against it)."""
    nearest = v.to(dtype)
    crossed = (nearest.float() < v) if up else (nearest.float() > v)
    return torch.where(crossed, _next_toward(nearest, up), nearest)


def group_params(
    lo: torch.Tensor, hi: torch.Tensor, steps: int, param_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group (zero, scale) in `param_dtype`, directed-rounded, NaN for bad groups; and the bad mask."""
    zero = _round_directed_float32(lo, param_dtype, up=False)
    # times float32(1 / steps) rather than / steps: one multiply, the same in both backends (a
    # Python scalar is cast to the float32 of the tensor it multiplies)
    raw = (hi - zero) * (1.0 / steps)
    raw = torch.where(raw > 0, raw.clamp_min(SMALLEST_NORMAL), torch.zeros_like(raw))
    scale = _round_directed_float32(raw, param_dtype, up=True)
    bad = ~(torch.isfinite(lo) & torch.isfinite(hi) & torch.isfinite(zero) & torch.isfinite(scale))
    # NaN written in `param_dtype` (a float32 NaN converted to bfloat16 gets different bits in the
    # vectorized and scalar conversions)
    nan = float("nan")
    zero, scale = zero.to(param_dtype), scale.to(param_dtype)
    return torch.where(bad, nan, zero), torch.where(bad, nan, scale), bad


def grouped(x_flat: torch.Tensor, layout: GroupLayout) -> torch.Tensor:
    """float32 `[n_groups, group_len]`; a short last group is padded with its own last value
    (which leaves its min and max unchanged; the padded codes are zeroed before packing)."""
    x = x_flat.float()
    pad = layout.n_groups * layout.group_len - layout.numel
    if pad:
        x = torch.cat([x, x[-1:].expand(pad)])
    return x.view(layout.n_groups, layout.group_len)


@functools.cache
def normal_tables(group_len: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 tensors of `interval_constants(group_len)` on `device`: the 4 levels and the 3
    inverse interval widths (built once: a fresh table per call is a host-to-device copy on CUDA)."""
    levels, inverse_widths = interval_constants(group_len)
    as_tensor = lambda values: torch.tensor(values, dtype=torch.float32, device=device)  # noqa: E731
    return as_tensor(levels), as_tensor(inverse_widths)


def encode(
    t: torch.Tensor, u: torch.Tensor | float, scheme: str, layout: GroupLayout
) -> torch.Tensor:
    """Codes (uint8) of positions `t` (in units of scale above zero) for noise `u`.

    Overwrites `t` (a temporary of `quantize`) to save memory on big inputs.
    """
    if scheme == "uniform":
        return t.add_(u).floor_().clamp_(0, layout.max_code).to(torch.uint8)
    levels, _ = interval_constants(layout.group_len)
    lower = (t >= levels[1]).to(torch.uint8) + (t >= levels[2]).to(torch.uint8)
    level_table, width_table = normal_tables(layout.group_len, t.device)
    index = lower.long()
    p_up = t.sub_(level_table[index]).mul_(width_table[index])  # index < 3: never the top level
    return lower + (u < p_up).to(torch.uint8)


def quantize(
    x_flat: torch.Tensor,
    layout: GroupLayout,
    scheme: str,
    param_dtype: torch.dtype,
    noise: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flat float tensor -> (packed codes `[n_groups, bytes_per_group]`, scale, zero).

    `noise`: float32 uniform [0, 1) per element (flat, `numel` long), or None to round to nearest.
    """
    x = grouped(x_flat, layout)
    lo, hi = x.amin(dim=1), x.amax(dim=1)  # two reductions: 20x faster than aminmax on CPU
    zero, scale, bad = group_params(lo, hi, steps_for(scheme, layout), param_dtype)
    scale_f = scale.float()
    inverse = torch.where(scale_f > 0, 1.0 / scale_f, torch.zeros_like(scale_f))
    t = torch.sub(x, zero.float()[:, None]).mul_(inverse[:, None])
    u: torch.Tensor | float = 0.5 if noise is None else grouped(noise, layout)
    codes = encode(t, u, scheme, layout)
    codes.view(-1)[layout.numel :] = 0  # the padding of a short last group
    # bad groups store codes 0 (their t may be NaN, whose conversion is meaningless)
    return pack_codes(codes, layout).masked_fill_(bad[:, None], 0), scale, zero


def dequantize(
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    layout: GroupLayout,
    scheme: str,
    dtype: torch.dtype,
) -> torch.Tensor:
    """Packed codes and parameters -> flat tensor of `numel` values in `dtype`."""
    codes = unpack_codes(packed, layout)
    if scheme == "uniform":
        level = codes.float()
    else:
        level = normal_tables(layout.group_len, codes.device)[0][codes.long()]
    values = level.mul_(scale.float()[:, None]).add_(zero.float()[:, None])  # zero + level * scale
    return values.reshape(-1)[: layout.numel].to(dtype)
