"""The CPU backends' loops for the codec and bit masks: `cpu-native` (C++ loops, `native`) where
they apply, `cpu-inductor` (the reference math fused by inductor, torch.compile's compiler) for the
rest, both CPU tensors only.

The eager torch path makes about ten passes over a tensor (min, max, shift, scale, noise, floor,
clamp, cast, pack) and draws its noise with `torch.rand`; on one CPU core that is ~0.6 GB/s. Here
the same float32 steps (`reference.group_params`, the `t` of `reference.quantize`, its encoding)
run as one vectorized loop that generates `counter_noise` inline and packs the codes through
integer words, so the result equals `reference.quantize(..., noise=counter_noise(seed))` bit for bit
(and dequantize equals `reference.dequantize`), whichever of the two loops runs.

`cpu-native`: float32 values with bfloat16 parameters (the default for float32 activations) go to
`tinykg_kernels.native`: plain C++ loops, the same bits, faster (`benchmarks.bench_kernels`).

`cpu-inductor`: every other dtype, the bit masks, and everything when `cpu-inductor` is asked for
or no native library could be built. Inductor must keep the bfloat16/float16 roundings of the
parameters (`emulate_precision_casts`), or the directed rounding would be optimized away. One
compile per (bits, scheme, dtypes, group length): a few seconds the first time in a process
(inductor's on-disk cache shortens it later); the number of groups is dynamic. The graphs are traced
with make_fx and called directly, without dynamo's per-call frame evaluation
(`_compile_with_dynamic_size`).

What runs in loops: groups whose length is a multiple of the codes per byte, fewer than 2**31
elements, on a little-endian CPU; a short last group (blocks that do not divide the tensor) runs
eagerly beside them. Anything else runs the same math eagerly (recorded as `torch`).
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable

import torch

from tinykg_kernels import bitmask, native, reference, usage
from tinykg_kernels.counter_noise import MAX_NUMEL, counter_noise, key_words, seed_keys
from tinykg_kernels.levels import interval_constants
from tinykg_kernels.packing import GroupLayout

COMPILE_OPTIONS = {"emulate_precision_casts": True}
# packed codes read as one integer word per byte's worth of codes: code k of the word at bit 8k
_WORD_DTYPES = {1: torch.int64, 2: torch.int32, 4: torch.int16}

_failure: str | None = None  # why compiling failed in this process (then nothing compiles again)


def compiles(layout: GroupLayout, device: torch.device) -> bool:
    """Whether the full groups of a call with this layout on this device run in the CPU loops
    (else the whole call runs eagerly, same math)."""
    return (
        _failure is None
        and device.type == "cpu"
        and sys.byteorder == "little"
        and layout.numel >= layout.group_len
        and layout.group_len % layout.per_byte == 0
        and layout.numel < MAX_NUMEL
    )


@functools.lru_cache(maxsize=1024)
def _split(layout: GroupLayout) -> tuple[GroupLayout, GroupLayout | None]:
    """The full groups and the short last group (None when every group is full); made once per
    layout (every codec call asks)."""
    full = layout.numel // layout.group_len * layout.group_len
    tail = layout.numel - full
    body = GroupLayout(numel=full, group_len=layout.group_len, bits=layout.bits)
    return body, (GroupLayout(tail, layout.group_len, layout.bits) if tail else None)


def failure() -> str | None:
    """Why `cpu-inductor` is off in this process (a failed compile), or None."""
    return _failure


def inductor_or_torch() -> str:
    """What a `run_compiled` call ran: inductor's loops, or the same body eagerly after a failed
    compile."""
    return "cpu-inductor" if _failure is None else "torch"


# -- the fused bodies (traced by make_fx; plain torch, runnable eagerly too) -------------------------


def _encode(t: torch.Tensor, u: torch.Tensor | float, max_code: int, constants: tuple | None):
    """`reference.encode` without the table gathers (which do not vectorize): the normal scheme's
    level and inverse width (`constants`: `interval_constants(group_len)`) come from comparisons,
    the same float32 values."""
    if constants is None:  # uniform
        return (t + u).floor().clamp(0, max_code).to(torch.uint8)
    levels, inverse_widths = constants
    above_1, above_2 = t >= levels[1], t >= levels[2]
    level = torch.where(above_2, levels[2], torch.where(above_1, levels[1], levels[0]))
    width = torch.where(
        above_2, inverse_widths[2], torch.where(above_1, inverse_widths[1], inverse_widths[0])
    )
    p_up = (t - level) * width
    # counted in float32 (exact for 0..3): bool-to-uint8 sums do not vectorize
    return (above_1.float() + above_2.float() + (u < p_up).float()).to(torch.uint8)


def _pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """`packing.pack_codes` for full groups, through integer words (contiguous, vectorizes)."""
    if bits == 8:
        return codes
    if bits == 4 and codes.shape[-1] % 4 == 0:
        return _pack_4_bits_through_int32(codes)
    per_byte, mask = 8 // bits, (1 << bits) - 1
    words = codes.view(_WORD_DTYPES[bits])
    packed = words & mask
    for k in range(1, per_byte):
        packed = packed | ((words >> (k * (8 - bits))) & (mask << (k * bits)))
    return packed.to(torch.uint8)


def _pack_4_bits_through_int32(codes: torch.Tensor) -> torch.Tensor:
    """`_pack` at 4 bits with int32 words of four codes, two packed bytes each (inductor leaves
    int16 word arithmetic scalar)."""
    words = codes.view(torch.int32)  # codes c0..c3 at bits 0, 8, 16, 24
    packed = (words & 0xF) | ((words >> 4) & 0xF0) | ((words >> 8) & 0xF00)
    packed = packed | ((words >> 12) & 0xF000)  # c0 | c1 << 4 | c2 << 8 | c3 << 12
    return packed.to(torch.int16).view(torch.uint8)


def _spread_nibble(nibble: torch.Tensor) -> torch.Tensor:
    """4 bits -> an int32 word holding one bit per byte."""
    return (nibble & 1) | ((nibble & 2) << 7) | ((nibble & 4) << 14) | ((nibble & 8) << 21)


def _unpack(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """`packing.unpack_codes` for full groups: each byte spread to one code per byte of a word."""
    if bits == 8:
        return packed
    if bits == 1:  # two int32 words per byte (int64 arithmetic does not vectorize here)
        byte = packed.to(torch.int32)
        words = torch.stack([_spread_nibble(byte & 15), _spread_nibble(byte >> 4)], dim=-1)
        return words.view(torch.uint8).view(packed.shape[0], -1)
    per_byte, mask = 8 // bits, (1 << bits) - 1
    words = packed.to(_WORD_DTYPES[bits])
    spread = words & mask
    for k in range(1, per_byte):
        spread = spread | ((words & (mask << (k * bits))) << (k * (8 - bits)))
    return spread.view(torch.uint8).view(packed.shape[0], -1)


def _quantize_body(
    scheme: str, bits: int, param_dtype: torch.dtype, stochastic: bool, group_len: int
) -> Callable:
    steps = (1 << bits) - 1 if scheme == "uniform" else 1
    constants = interval_constants(group_len) if scheme == "normal" else None

    def quantize_groups(x: torch.Tensor, keys: torch.Tensor):  # x: [groups, group_len]
        x = x.float()
        zero, scale, bad = reference.group_params(x.amin(dim=1), x.amax(dim=1), steps, param_dtype)
        scale_f = scale.float()
        inverse = torch.where(scale_f > 0, 1.0 / scale_f, torch.zeros_like(scale_f))
        t = (x - zero.float()[:, None]) * inverse[:, None]
        u = counter_noise(keys, x.numel()).view(x.shape) if stochastic else 0.5
        codes = _encode(t, u, (1 << bits) - 1, constants)
        return _pack(codes, bits), scale, zero, bad

    return quantize_groups


def _dequantize_body(scheme: str, bits: int, dtype: torch.dtype, group_len: int) -> Callable:
    levels, _ = interval_constants(group_len) if scheme == "normal" else ((), ())

    def dequantize_groups(packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor):
        codes = _unpack(packed, bits)
        if scheme == "uniform":
            level = codes.float()
        else:
            # the table as float comparisons (a select of the same float32 constants; byte
            # comparisons and gathers do not vectorize)
            code = codes.float()
            low = torch.where(code < 0.5, levels[0], levels[1])
            level = torch.where(code < 1.5, low, torch.where(code < 2.5, levels[2], levels[3]))
        return (level * scale.float()[:, None] + zero.float()[:, None]).to(dtype)

    return dequantize_groups


def _pack_bits_body() -> Callable:
    def pack_mask(mask: torch.Tensor) -> torch.Tensor:  # bool [8k] -> uint8 [k]
        return _pack(mask.view(torch.uint8), 1)

    return pack_mask


def _unpack_bits_body(dtype: torch.dtype) -> Callable:
    def unpack_mask(packed: torch.Tensor) -> torch.Tensor:  # uint8 [k] -> [8k] of 0/1 in dtype
        bits = _unpack(packed, 1).reshape(-1)  # codes are 0 or 1
        return bits.view(torch.bool) if dtype == torch.bool else bits.to(dtype)

    return unpack_mask


# -- compiling ---------------------------------------------------------------------------------------


def _signature(args: tuple[torch.Tensor, ...], dynamic: tuple[int | None, ...]) -> tuple:
    """What a graph is specialized to besides its body and key: each argument's dtype and sizes,
    -1 for its dynamic dim (`dynamic[i]`: the dim of argument i whose size may vary, or None)."""
    signature = []
    for arg, dim in zip(args, dynamic, strict=True):
        sizes = list(arg.shape)
        if dim is not None:
            sizes[dim] = -1
        signature.append((arg.dtype, tuple(sizes)))
    return tuple(signature)


@functools.cache
def _compiled(body_factory: Callable, key: tuple, signature: tuple) -> Callable:
    """One compiled function per body, `key` (the arguments of `body_factory`) and argument
    `signature`; any size of the dynamic dims runs it."""
    return _compile_with_dynamic_size(body_factory(*key), signature)


def _compile_with_dynamic_size(body: Callable, signature: tuple) -> Callable:
    """`body` traced once (make_fx) with the dynamic dims (-1 in `signature`) as one symbol and
    every other size static, then compiled by inductor. The result is called directly:
    torch.compile would evaluate the frame and check its guards on every call, and a training
    epoch makes hundreds of calls. (What those guards would catch cannot change here: the
    signature is the cache key, and the callers pass contiguous tensors.)"""
    from torch._inductor import compile as inductor_compile
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    # the bodies build small constant tensors (level tables, NaN) while tracing: real, allowed
    fake_mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    examples = []
    for dtype, sizes in signature:
        example = torch.empty([_DYNAMIC_HINT if s == -1 else s for s in sizes], dtype=dtype)
        if -1 in sizes:  # one symbol for every dynamic dim (same size hint)
            dynamic = [DimDynamic.DYNAMIC if s == -1 else DimDynamic.STATIC for s in sizes]
            context = StatelessSymbolicContext(dynamic_sizes=dynamic)
            examples.append(fake_mode.from_tensor(example, symbolic_context=context))
        else:
            examples.append(fake_mode.from_tensor(example, static_shapes=True))
    graph = make_fx(body, tracing_mode="symbolic")(*examples)
    return inductor_compile(graph, examples, options=COMPILE_OPTIONS)


# the size inductor's heuristics assume for a dynamic dim (a typical activation)
_DYNAMIC_HINT = 4096


def run_compiled(
    body_factory: Callable, key: tuple, *args: torch.Tensor, dynamic: tuple[int | None, ...]
):
    """`body_factory(*key)` compiled for `args` and run on them (`dynamic[i]`: the dim of `args[i]`
    whose size may differ from call to call, or None); on a compile failure, warn once, switch the
    backend off for this process and run the same body eagerly. Package-internal: the bodies are
    plain torch functions (this module's codec, `leaky_pair`'s fused activation)."""
    global _failure
    args = tuple([arg.contiguous() for arg in args])  # the compiled code assumes dense strides
    try:
        return _compiled(body_factory, key, _signature(args, dynamic))(*args)
    except Exception as exc:  # no C++ compiler, an inductor bug: the eager path is the same math
        if _failure is None:
            _failure = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
            warnings.warn(
                f"tinykg_kernels: torch.compile failed ({_failure}); backend cpu-inductor is off "
                "in this process and the torch path runs instead (install a C++ compiler, e.g. g++, "
                "or set TINYKG_KERNELS_BACKEND=torch to silence this)",
                RuntimeWarning,
                stacklevel=3,
            )
        return body_factory(*key)(*args)


# -- the backends ------------------------------------------------------------------------------------


def quantize(
    flat: torch.Tensor,
    layout: GroupLayout,
    scheme: str,
    param_dtype: torch.dtype,
    seed: int | None,
    *,
    native_loops: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flat tensor -> (codes, scale, zero), equal to `reference.quantize` with noise
    `counter_noise(seed_keys(seed))` (round to nearest when `seed` is None); the native loops
    where they apply unless `native_loops` is False, else inductor's. Recorded in `usage`."""
    stochastic = seed is not None
    if not compiles(layout, flat.device):
        usage.record("quantize", "torch")
        noise_keys = seed_keys(seed) if stochastic else None
        return _quantize_eagerly(flat, layout, scheme, param_dtype, noise_keys)
    body, tail = _split(layout)
    x = (flat if tail is None else flat[: body.numel]).view(body.n_groups, body.group_len)
    if native_loops and native.codec_applies(flat.dtype, param_dtype, flat.device):
        normal = interval_constants(layout.group_len) if scheme == "normal" else None
        words = key_words(seed) if stochastic else None
        codes, scale, zero, _ = native.quantize_groups(x.contiguous(), layout.bits, normal, words)
        usage.record("quantize", "cpu-native")
    else:
        keys = seed_keys(seed if stochastic else 0)  # the body ignores them when not stochastic
        key = (scheme, layout.bits, param_dtype, stochastic, layout.group_len)
        codes, scale, zero, bad = run_compiled(_quantize_body, key, x, keys, dynamic=(0, None))
        usage.record("quantize", inductor_or_torch())
        if bool(bad.any()):  # NaN/Inf groups store codes 0 and NaN parameters, as the reference
            codes = codes.masked_fill(bad[:, None], 0)
            # the reference's NaN bits (a vectorized float32-to-bfloat16 conversion writes others)
            scale, zero = scale.masked_fill(bad, float("nan")), zero.masked_fill(bad, float("nan"))
    if tail is None:
        return codes, scale, zero
    noise_keys = seed_keys(seed) if stochastic else None
    last = _quantize_eagerly(flat[body.numel :], tail, scheme, param_dtype, noise_keys, body.numel)
    return tuple(
        torch.cat([part, end]) for part, end in zip((codes, scale, zero), last, strict=True)
    )


def _quantize_eagerly(flat, layout, scheme, param_dtype, keys, start: int = 0):
    """`reference.quantize` with the counter noise of elements `start ..` (None: round to nearest)."""
    noise = counter_noise(keys, layout.numel, start) if keys is not None else None
    return reference.quantize(flat, layout, scheme, param_dtype, noise)


def dequantize(
    codes: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    layout: GroupLayout,
    scheme: str,
    dtype: torch.dtype,
    *,
    native_loops: bool = True,
) -> torch.Tensor:
    """(codes, scale, zero) -> flat tensor of `numel` values in `dtype`, as `reference.dequantize`
    (native loops as in `quantize`). Recorded in `usage`."""
    if not compiles(layout, codes.device):
        usage.record("dequantize", "torch")
        return reference.dequantize(codes, scale, zero, layout, scheme, dtype)
    body, tail = _split(layout)
    n = body.n_groups
    # the full groups' parameters (all of them, unsliced, when every group is full)
    parts = (codes, scale, zero) if tail is None else (codes[:n], scale[:n], zero[:n])
    if native_loops and native.codec_applies(dtype, scale.dtype, codes.device):
        levels = interval_constants(layout.group_len)[0] if scheme == "normal" else None
        values = native.dequantize_groups(
            parts[0].contiguous(), parts[1], parts[2], layout.group_len, layout.bits, levels
        )
        usage.record("dequantize", "cpu-native")
    else:
        key = (scheme, layout.bits, dtype, layout.group_len)
        values = run_compiled(_dequantize_body, key, *parts, dynamic=(0, 0, 0))
        usage.record("dequantize", inductor_or_torch())
    values = values.reshape(-1)
    if tail is None:
        return values
    last = reference.dequantize(codes[n:], scale[n:], zero[n:], tail, scheme, dtype)
    return torch.cat([values, last])


def pack_bits(flat: torch.Tensor) -> torch.Tensor:
    """`bitmask.pack_bits` of a flat bool CPU tensor: whole bytes in inductor's loops (there are
    no native ones), a last partial byte eagerly. Recorded in `usage`."""
    whole = flat.numel() // 8 * 8
    if _failure is not None or whole == 0:
        usage.record("pack_bits", "torch")
        return bitmask.pack_bits_eagerly(flat)
    packed = run_compiled(_pack_bits_body, (), flat[:whole], dynamic=(0,))
    usage.record("pack_bits", inductor_or_torch())
    if whole == flat.numel():
        return packed
    return torch.cat([packed, bitmask.pack_bits_eagerly(flat[whole:])])


def unpack_bits(packed: torch.Tensor, numel: int, dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """`bitmask.unpack_bits` to a flat CPU tensor of `numel` elements: bool, or 1/0 in `dtype`
    (inductor's loops, as `pack_bits`). Recorded in `usage`."""
    if _failure is not None or numel < 8:
        usage.record("unpack_bits", "torch")
        return bitmask.unpack_bits_eagerly(packed, numel).to(dtype)
    mask = run_compiled(_unpack_bits_body, (dtype,), packed, dynamic=(0,))
    usage.record("unpack_bits", inductor_or_torch())
    return mask[:numel]
