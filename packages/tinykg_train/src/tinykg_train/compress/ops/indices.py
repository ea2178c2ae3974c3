"""Index tensors as the compressed ops save them: int32, converted once per step and shared."""

from __future__ import annotations

import torch

from tinykg_train.compress import stack

INT32_MAX = 2**31 - 1


def _to_int32(index: torch.Tensor) -> torch.Tensor:
    return index.to(torch.int32)


def compact_index(index: torch.Tensor, size: int) -> torch.Tensor:
    """`index` as int32 when its values fit (< `size` <= 2^31 - 1); other dtypes as they are.

    Inside a `compress_saved_tensors`/`ActivationMeter` block the conversion of one index tensor is
    made once and shared by every op that saves it. Models that keep int32 graph buffers pay nothing.
    """
    if index.dtype != torch.int64 or size > INT32_MAX:
        return index
    return stack.cached("int32", index, _to_int32)


def check_index(name: str, index: torch.Tensor) -> None:
    if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
        raise ValueError(
            f"'{name}' needs an integer dtype (got {index.dtype}); pass node ids as int32 or int64"
        )
