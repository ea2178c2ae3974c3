"""One embedding table and its Adam state kept whole on the device (the mode without offload).

It offers the calls `DeviceCache` offers, so `RowTables` runs one code path for both modes: a row's
place is its global id, nothing is ever pinned, evicted or written back.
"""

from __future__ import annotations

import torch


class ResidentTable:
    """(weight, exp_avg, exp_avg_sq) [rows, dim] on `device`, updated in place; the moments in
    `moment_dtype` (None: the weight's)."""

    def __init__(
        self, weight: torch.Tensor, *, device: torch.device, moment_dtype: torch.dtype | None = None
    ):
        weight = weight.detach().to(device)
        dtype = moment_dtype or weight.dtype
        moments = [torch.zeros_like(weight, dtype=dtype) for _ in range(2)]
        self.tensors = (weight, *moments)
        self.n_rows, self.dim = weight.shape
        self.counts: dict[str, int] = {}

    def acquire(self, ids: torch.Tensor, *, lookahead: int = 0) -> None:
        """Nothing to place: the rows are on the device (no handle to release)."""
        return None

    def release(self, handle: None) -> None:
        return None

    def finish(self, handle: None, *, updated: bool) -> None:
        return None

    def pinned(self) -> int:
        return 0

    def empty(self) -> bool:
        """No cache to give up: the table is the device memory."""
        return False

    def current(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The whole current table and state (live, not copies)."""
        return self.tensors

    def load(self, weight: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor) -> None:
        for target, source in zip(self.tensors, (weight, exp_avg, exp_avg_sq), strict=True):
            target.copy_(source)

    def memory(self) -> dict[str, int]:
        weight, exp_avg, exp_avg_sq = self.tensors
        return {
            "device_tables": weight.numel() * weight.element_size(),
            "device_optimizer": 2 * exp_avg.numel() * exp_avg.element_size(),
            "host_tables": 0,
            "host_optimizer": 0,
            "host_index": 0,
        }
