"""Rows gathered from a parameter, stored as their indices rather than quantized.

`weight.index_select(0, index)` of a parameter (KGAT's TransR projects such rows in every KG step;
every model's L2 penalty squares them) needs no rounding at all: the parameter is held anyway and
does not change before backward (an in-place update would trip autograd's version check), so the
rows are rebuilt exactly from it and the index, in the narrowest integer dtype. Views of the
gathered rows (`chunk`, `split`) are rebuilt from the rows they reach only, then viewed again (the
three chunks of a loss's one gather rebuild its rows once, not three times). Rows come from
autograd's `index_select` (recognized by its node) or from `ops.embedding` of a parameter (which
registers its output with `remember`: its node is a custom Function's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tinykg_train.compress import stack
from tinykg_train.compress.ops.indices import compact_index, widen_index

View = tuple[tuple[int, ...], tuple[int, ...], int]  # size, stride, offset within the rows


@dataclass(frozen=True)
class Gathered:
    """`weight.index_select(0, index)` (then `view`, when set), rebuilt on `decode()`."""

    weight: torch.Tensor
    index: torch.Tensor
    view: View | None = None

    def decode(self) -> torch.Tensor:
        if self.view is None:
            return self.weight.index_select(0, widen_index(self.index))
        # only the rows the view reaches (a chunk of the rows: that chunk, not all of them)
        size, stride, offset = self.view
        row_numel = math.prod(self.weight.shape[1:])
        if row_numel == 0 or 0 in size:
            first, stop = 0, self.index.shape[0]
        else:
            last = offset + sum((n - 1) * step for n, step in zip(size, stride, strict=True))
            first, stop = offset // row_numel, last // row_numel + 1
        rows = self.weight.index_select(0, widen_index(self.index[first:stop]))
        return rows.as_strided(size, stride, offset - first * row_numel)

    @property
    def nbytes(self) -> int:
        return self.index.numel() * self.index.element_size()  # the weight is held anyway

    def parts(self) -> tuple[torch.Tensor, ...]:
        return (self.weight, self.index)

    def meta(self) -> View | None:
        return self.view

    @classmethod
    def rebuild(cls, meta: View | None, parts: tuple[torch.Tensor, ...]) -> Gathered:
        return cls(parts[0], parts[1], meta)


_KIND = ("gathered rows",)  # the scope-cache kind of `remember`ed rows


def remember(rows: torch.Tensor, weight: torch.Tensor, index: torch.Tensor) -> None:
    """Let `gathered_rows` rebuild `rows` (= `F.embedding(index, weight)`, index compacted) from
    `weight` and `index` while a compression or meter scope is active and `rows` is unchanged."""
    view = None if index.dim() == 1 else (tuple(rows.shape), tuple(rows.stride()), 0)
    gathered = Gathered(weight, index.reshape(-1), view)
    stack.cached(_KIND, rows, lambda _: gathered)


def _viewed(gathered: Gathered, base: torch.Tensor, tensor: torch.Tensor) -> Gathered:
    """`gathered` (the rows of `base`) narrowed to `tensor`, a view of `base`."""
    if base is tensor:
        return gathered
    offset = tensor.storage_offset() - base.storage_offset()
    return Gathered(
        gathered.weight, gathered.index, (tuple(tensor.shape), tuple(tensor.stride()), offset)
    )


def gathered_rows(tensor: torch.Tensor, *, key: tuple | None = None) -> Gathered | None:
    """`tensor` as rows of a parameter (or a view of them), when autograd made it so; else None.
    `key`: `stack.tensor_key(tensor)`, when the caller has it already."""
    base = tensor if tensor._base is None else tensor._base
    remembered = stack.lookup(_KIND, base, key=key if base is tensor else None)
    if remembered is not None:
        return _viewed(remembered, base, tensor)
    node = base.grad_fn
    if type(node).__name__ != "IndexSelectBackward0" or node._saved_dim != 0:
        return None
    source = node.next_functions[0][0]
    weight = getattr(source, "variable", None)  # an AccumulateGrad: the rows of a leaf
    if weight is None or not stack.is_persistent(weight) or weight.dim() != 2:
        return None
    index = compact_index(node._saved_index, weight.shape[0])
    return _viewed(Gathered(weight, index), base, tensor)
