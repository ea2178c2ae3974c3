"""`row_ranges`: copies of disjoint row ranges of one tensor, with one gradient buffer, not one each.

Slicing a whole-graph tensor twice (KGAT keeps the item rows and the user rows of every layer's
output) gives two `SliceBackward` nodes, each of which returns a zero-filled tensor of the whole
shape, and autograd adds them into a third: three `[nodes, dim]` tensors at once in a step's
backward where one does. This Function writes every range's gradient into one zero-filled tensor.
"""

from __future__ import annotations

from typing import Any

import torch


class _RowRanges(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, ranges: tuple[tuple[int, int], ...]) -> tuple:
        ctx.ranges, ctx.shape = ranges, x.shape
        return tuple(x[start:stop].clone() for start, stop in ranges)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, None]:
        present = [g for g in grads if g is not None]
        if not present:
            return None, None
        out = present[0].new_zeros(ctx.shape)
        for (start, stop), grad in zip(ctx.ranges, grads, strict=True):
            if grad is not None:
                out[start:stop] = grad
        return out, None


def row_ranges(x: torch.Tensor, ranges: tuple[tuple[int, int], ...]) -> tuple[torch.Tensor, ...]:
    """`tuple(x[start:stop].clone() for start, stop in ranges)`, ranges disjoint and in bounds;
    backward builds x's gradient in one zero-filled tensor."""
    previous = 0
    for start, stop in sorted(ranges):
        if not previous <= start <= stop <= x.shape[0]:
            raise ValueError(
                f"row_ranges needs disjoint ranges within {x.shape[0]} rows (got {list(ranges)})"
            )
        previous = stop
    return _RowRanges.apply(x, tuple((int(a), int(b)) for a, b in ranges))
