# ruff: noqa: SIM108  (constexpr branches inside kernels read better as if-statements)
"""Float bit arithmetic for the Triton kernels: directed rounding to 16-bit floats and back.

These conversions use integer operations on the IEEE bit patterns instead of `.to()`: Triton's CPU
interpreter rounds float32 -> bfloat16 casts toward zero and mishandles some float16 and bfloat16
subnormals, whereas integer arithmetic gives the same bits in the interpreter and on a GPU. Each
helper returns the 16-bit pattern (held in an int32) and its exact float32 value.
"""

import triton
import triton.language as tl

FLOAT_MAX = tl.constexpr(3.4028234663852886e38)


@triton.jit
def is_finite(v):
    return tl.abs(v) <= FLOAT_MAX


@triton.jit
def round_bf16(v, UP: tl.constexpr):
    """float32 -> bfloat16 rounded towards +inf (UP) or -inf: (bit pattern, value)."""
    bits = v.to(tl.int32, bitcast=True)
    high = bits >> 16  # truncation: rounds the magnitude down
    inexact = (bits & 0xFFFF) != 0
    if UP:
        step = inexact & (v > 0)
    else:
        step = inexact & (v < 0)
    high = tl.where(step, high + 1, high)  # +1 on the pattern = one step away from zero
    return high, (high << 16).to(tl.float32, bitcast=True)


@triton.jit
def f16_magnitude_value(magnitude):
    """float32 value of a non-negative float16 bit pattern (0..0x7FFF)."""
    exponent = magnitude >> 10
    fraction = magnitude & 0x3FF
    normal = (((exponent + 112) << 23) | (fraction << 13)).to(tl.float32, bitcast=True)
    subnormal = magnitude.to(tl.float32) * 5.9604644775390625e-08  # 2**-24
    special = (0x7F800000 | (fraction << 13)).to(tl.float32, bitcast=True)
    return tl.where(exponent == 0, subnormal, tl.where(exponent == 31, special, normal))


@triton.jit
def round_f16(v, UP: tl.constexpr):
    """float32 -> float16 rounded towards +inf (UP) or -inf: (bit pattern, value)."""
    bits = v.to(tl.int32, bitcast=True)
    sign = (bits >> 16) & 0x8000
    magnitude = bits & 0x7FFFFFFF
    exponent = (magnitude >> 23) - 112  # float16 biased exponent
    mantissa = magnitude & 0x7FFFFF
    # normal float16 range: truncate to 10 mantissa bits; past 65504 truncation saturates
    normal = (exponent << 10) | (mantissa >> 13)
    overflow = exponent >= 31
    normal = tl.where(overflow, 0x7BFF, normal)
    normal_inexact = ((mantissa & 0x1FFF) != 0) | overflow
    # subnormal float16 range: whole multiples of 2**-24
    scaled = tl.minimum(tl.abs(v), 1.0) * 16777216.0
    subnormal = scaled.to(tl.int32)
    subnormal_inexact = subnormal.to(tl.float32) != scaled
    is_subnormal = exponent < 1
    out = tl.where(is_subnormal, subnormal, normal)
    inexact = tl.where(is_subnormal, subnormal_inexact, normal_inexact)
    special = magnitude >= 0x7F800000  # inf and NaN keep their class
    out = tl.where(special, tl.where(magnitude == 0x7F800000, 0x7C00, 0x7E00), out)
    inexact = inexact & ~special
    if UP:
        step = inexact & (v > 0)
    else:
        step = inexact & (v < 0)
    out = tl.where(step, out + 1, out)
    value = f16_magnitude_value(out)
    return out | sign, tl.where(sign != 0, -value, value)


@triton.jit
def round_param(v, UP: tl.constexpr, PARAM: tl.constexpr):
    """Directed rounding to the parameter dtype (0 bfloat16, 1 float16, 2 float32: exact)."""
    if PARAM == 0:
        return round_bf16(v, UP)
    elif PARAM == 1:
        return round_f16(v, UP)
    else:
        return v, v


@triton.jit
def load_param(ptr, rows, row_ok, PARAM: tl.constexpr):
    """Per-row parameter as float32 (16-bit ones are stored as int16 bit patterns)."""
    if PARAM == 2:
        return tl.load(ptr + rows, mask=row_ok, other=0.0)
    bits = tl.load(ptr + rows, mask=row_ok, other=0).to(tl.int32)
    if PARAM == 0:
        return (bits << 16).to(tl.float32, bitcast=True)
    value = f16_magnitude_value(bits & 0x7FFF)
    return tl.where((bits & 0x8000) != 0, -value, value)


@triton.jit
def store_param(ptr, rows, row_ok, pattern, bad, PARAM: tl.constexpr):
    """Store per-row parameters; bad rows get torch's canonical NaN of the parameter dtype."""
    if PARAM == 0:
        tl.store(ptr + rows, tl.where(bad, 0x7FC0, pattern).to(tl.int16), mask=row_ok)
    elif PARAM == 1:
        tl.store(ptr + rows, tl.where(bad, 0x7E00, pattern).to(tl.int16), mask=row_ok)
    else:
        tl.store(ptr + rows, tl.where(bad, float("nan"), pattern), mask=row_ok)


@triton.jit
def bf16_bits_nearest(v):
    """float32 -> bfloat16 bit pattern, round to nearest even (as torch casts); NaN -> canonical."""
    bits = v.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return tl.where(v != v, 0x7FC0, rounded)
