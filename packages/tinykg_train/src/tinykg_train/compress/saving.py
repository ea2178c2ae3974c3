"""Keep compressed values in an autograd ctx through `ctx.save_for_backward`.

Compressed values (`Compressed`, `PackedMask`) are split into their plain tensors, so autograd's
saved-tensor machinery (version checks, the hooks an `ActivationMeter` counts through) sees every
byte; `load` rebuilds them. `apply_compressed` runs a Function whose saved tensors are already
compressed, so an active `compress_saved_tensors` stores them as they are.
"""

from __future__ import annotations

from typing import Any

import torch

from tinykg_train.compress import stack
from tinykg_train.compress.codec import decompress

Saved = torch.Tensor | Any | None


def save(ctx: Any, *items: Saved) -> None:
    """`ctx.save_for_backward` for tensors, None and compressed values (anything with `parts()`)."""
    flat: list[torch.Tensor | None] = []
    layout: list[tuple[type | None, Any, int]] = []
    for item in items:
        if item is None or isinstance(item, torch.Tensor):
            layout.append((None, None, 1))
            flat.append(item)
        else:
            parts = item.parts()
            layout.append((type(item), item.meta(), len(parts)))
            flat.extend(parts)
    ctx.save_for_backward(*flat)
    ctx.tinykg_layout = layout


def load(ctx: Any, *, decode: bool = True) -> list[Any]:
    """The items given to `save`, in order; compressed ones decoded to tensors unless `decode=False`."""
    flat = ctx.saved_tensors
    items: list[Any] = []
    position = 0
    for kind, meta, count in ctx.tinykg_layout:
        if kind is None:
            item = flat[position]
        else:
            item = kind.rebuild(meta, tuple(flat[position : position + count]))
        position += count
        items.append(decompress(item) if decode else item)
    return items


def apply_compressed(function: type[torch.autograd.Function], *args: Any) -> Any:
    """`function.apply(*args)` for a Function that saves only compressed or persistent tensors."""
    with stack.precompressed():
        return function.apply(*args)
