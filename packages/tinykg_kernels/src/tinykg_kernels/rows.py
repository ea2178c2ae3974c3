"""`live_rows`: which rows of a tensor hold a nonzero value.

The codec keeps this mask beside a tensor whose quantization groups span several rows, so that
all-zero rows decode as exact zeros (`tinykg_train.compress.codec.Compressed`). It is asked for every
such saved tensor, and torch's `x.ne(0).any(dim=-1)` makes a bool tensor and then reduces it along
short rows one element at a time (slower than the quantize that follows, for rows of 60 floats); the
native loop ORs each row's bits in one pass. `cpu-native` where the library loads (float32 CPU
tensors, any size: there is no compile to amortize), torch's ops elsewhere; `usage` records which.
"""

from __future__ import annotations

import torch

from tinykg_kernels import dispatch, native, usage


def live_rows(x: torch.Tensor, backend: str | None = None) -> torch.Tensor | None:
    """`x.ne(0).any(dim=-1, keepdim=True)`, bool `[..., 1]` (-0.0 counts as zero, NaN as nonzero),
    or None when every row holds a nonzero value (nothing to keep)."""
    if x.dim() == 0:
        raise ValueError("live_rows needs a tensor of rows (at least 1 dim); got a scalar")
    chosen = dispatch.select_backend(x.device, backend, dispatch.CPU_LOOPS_MIN_NUMEL)
    # "cpu-native" comes only with the library loaded (`select_backend` checked, or raised)
    if chosen == "cpu-native" and x.dtype == torch.float32:
        usage.record("live_rows", "cpu-native")
        rows = x.detach().reshape(-1, x.shape[-1]).contiguous()
        live, dead = native.live_rows(rows)
        return None if dead == 0 else live.view(*x.shape[:-1], 1)
    usage.record("live_rows", "torch")
    live = x.ne(0).any(dim=-1, keepdim=True)
    return None if bool(live.all()) else live
