"""Index tensors as the compressed ops save them: in the narrowest integer dtype that holds them.

An index into `size` rows is stored as uint8 (size <= 256), uint16 (<= 65,536) or int32, converted
once per step and shared by every op that saves it (inside a `compress_saved_tensors` or
`ActivationMeter` block), and widened to int64 in backward, where torch's index ops need int32 or
int64: with int64 `index_add_` on the CPU takes its sorted fast path (2-4x the int32 loop on
`[2048..16384, 32..64]` rows, the same sums in the same order). On a sampled subgraph the indices
are a large share of what is saved: int64 -> uint16 is 4x less.
"""

from __future__ import annotations

import torch

from tinykg_train.compress import stack

_NARROW = ((256, torch.uint8), (65_536, torch.uint16), (2**31 - 1, torch.int32))


def narrowest_dtype(size: int) -> torch.dtype | None:
    """The smallest dtype holding 0..size-1, or None when only int64 does."""
    return next((dtype for bound, dtype in _NARROW if size <= bound), None)


def compact_index(index: torch.Tensor, size: int) -> torch.Tensor:
    """`index` (values in [0, size), checked by the op's forward) in `narrowest_dtype(size)`."""
    dtype = narrowest_dtype(size)
    if dtype is None or index.dtype == dtype:
        return index
    return stack.cached(("index", dtype), index, lambda t: t.to(dtype))


def widen_index(index: torch.Tensor) -> torch.Tensor:
    """A saved index as int64: the dtype torch's index ops run fastest with (a transient copy in
    backward; what is stored stays narrow)."""
    return index if index.dtype == torch.int64 else index.long()


def check_index(name: str, index: torch.Tensor) -> None:
    if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
        raise ValueError(
            f"'{name}' needs an integer dtype (got {index.dtype}); pass node ids as int32 or int64"
        )
