"""The codec's calls into the native library (`codec.cpp`): quantize and dequantize whole groups of
float32 values with bfloat16 parameters, bit-equal to `reference` with the counter noise."""

from __future__ import annotations

import functools

import torch

from tinykg_kernels.native import library


def codec_applies(dtype: torch.dtype, param_dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a call with these dtypes on this device runs natively: float32 values on the CPU
    with bfloat16 parameters (the default for float32 activations)."""
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and param_dtype == torch.bfloat16
        and library.available()
    )


@functools.cache
def _table(values: tuple[float, ...]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def quantize_groups(
    x: torch.Tensor,
    bits: int,
    normal: tuple[tuple[float, ...], tuple[float, ...]] | None,
    keys: tuple[int, int] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Contiguous float32 `[groups, group_len]` -> (packed codes, bfloat16 scale, bfloat16 zero, bad
    flags); `normal`: the normal scheme's (levels, inverse widths), or None for uniform; `keys`: the
    counter noise's two int32 keys, or None to round to nearest."""
    n_groups, group_len = x.shape
    packed = torch.empty((n_groups, group_len * bits // 8), dtype=torch.uint8)
    scale = torch.empty(n_groups, dtype=torch.bfloat16)
    zero = torch.empty(n_groups, dtype=torch.bfloat16)
    bad = torch.empty(n_groups, dtype=torch.bool)
    table = None if normal is None else _table(normal[0] + normal[1])
    k0, k1 = keys if keys is not None else (0, 0)
    status = library.load().tinykg_quantize_bf16(
        x.data_ptr(), n_groups, group_len, bits,
        None if table is None else table.data_ptr(), keys is not None, k0, k1,
        packed.data_ptr(), zero.data_ptr(), scale.data_ptr(), bad.data_ptr(),
    )  # fmt: skip
    if status != 0:
        raise ValueError(
            f"native quantize: unsupported width {bits} (scheme normal: {normal is not None})"
        )
    return packed, scale, zero, bad


def dequantize_groups(
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    group_len: int,
    bits: int,
    normal_levels: tuple[float, ...] | None,
) -> torch.Tensor:
    """Packed codes of full groups and their bfloat16 parameters: float32 `[groups, group_len]`."""
    n_groups = packed.shape[0]
    out = torch.empty((n_groups, group_len), dtype=torch.float32)
    table = None if normal_levels is None else _table(normal_levels)
    status = library.load().tinykg_dequantize_bf16(
        packed.data_ptr(), zero.data_ptr(), scale.data_ptr(), n_groups, group_len, bits,
        None if table is None else table.data_ptr(), out.data_ptr(),
    )  # fmt: skip
    if status != 0:
        raise ValueError(f"native dequantize: unsupported width {bits}")
    return out


def live_rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Contiguous float32 `[rows, row_len]` -> (bool `[rows]`: the row holds a value != 0, the
    number of rows that do not)."""
    n_rows, row_len = x.shape
    live = torch.empty(n_rows, dtype=torch.bool)
    dead = library.load().tinykg_live_rows(x.data_ptr(), n_rows, row_len, live.data_ptr())
    return live, int(dead)
