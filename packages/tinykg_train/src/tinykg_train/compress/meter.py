"""`ActivationMeter`: the bytes autograd holds for backward during one forward pass, per module.

    with compress_saved_tensors(config):          # optional; the meter composes with it
        with ActivationMeter(model) as meter:
            loss = model.loss(batch)
    meter.total_bytes, meter.by_module(), print(meter.table())

What is counted: every tensor autograd saves in the block (through any op, including the
`ctx.save_for_backward` of the compressed ops) in the form it is stored, i.e. after compression;
parameters and buffers excluded; a storage counted once however many tensors view it; only what is
still held when the block ends (saved tensors of graph parts dropped inside the block are freed).
Each storage is attributed to the innermost module of `model` running when it was first saved
(`""` = the model itself, outside any submodule).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from tinykg_train.compress import stack


def _stored_tensors(stored: Any) -> list[torch.Tensor]:
    """The plain tensors that hold a stored value's bytes."""
    if isinstance(stored, torch.Tensor):
        if stored.layout == torch.sparse_coo:
            return [stored._indices(), stored._values()]
        if stored.layout == torch.sparse_csr:
            return [stored.crow_indices(), stored.col_indices(), stored.values()]
        return [stored]
    # a part may be a parameter (the table `Gathered` rows are rebuilt from): held anyway
    return [t for t in stored.parts() if t is not None and not stack.is_persistent(t)]


def _storage_bytes(tensor: torch.Tensor) -> int:
    if tensor.layout != torch.strided:
        return tensor.numel() * tensor.element_size()
    return tensor.untyped_storage().nbytes()


class ActivationMeter(stack.SavedTensorLayer):
    """Counts saved-for-backward bytes in a `with` block; see the module docstring."""

    def __init__(self, model: torch.nn.Module | None = None) -> None:
        self.model = model
        self._names: list[str] = [""]
        self._records: list[tuple[weakref.ref, str]] = []
        self._handles: list[Any] = []
        self._context: Any = None
        self._summary: dict[str, int] | None = None

    # -- the saved-tensor layer ---------------------------------------------------------------

    def observe(self, tensor: torch.Tensor, stored: Any) -> None:
        if stack.is_persistent(tensor):
            return
        module = self._names[-1]
        for part in _stored_tensors(stored):
            self._records.append((weakref.ref(part), module))

    # -- context ------------------------------------------------------------------------------

    def __enter__(self) -> ActivationMeter:
        self._records, self._summary, self._names = [], None, [""]
        persistent = set()
        if self.model is not None:
            persistent = stack.model_storages(self.model)
            for name, module in self.model.named_modules():
                self._handles.append(module.register_forward_pre_hook(self._enter_module(name)))
                self._handles.append(
                    module.register_forward_hook(self._leave_module, always_call=True)
                )
        self._context = stack.pushed(self, persistent)
        self._context.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._context.__exit__(*exc)
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles, self._context = [], None
            self._summary = self._summarize()
            self._records = []

    def _enter_module(self, name: str) -> Any:
        def hook(module: torch.nn.Module, args: Any) -> None:
            self._names.append(name)

        return hook

    def _leave_module(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if len(self._names) > 1:
            self._names.pop()

    @property
    def current_module(self) -> str:
        """Qualified name of the innermost module of `model` running now ("" outside any)."""
        return self._names[-1]

    # -- results ------------------------------------------------------------------------------

    def _summarize(self) -> dict[str, int]:
        by_module: dict[str, int] = {}
        seen: set[Any] = set()
        for ref, module in self._records:
            part = ref()
            if part is None:
                continue
            key = stack.storage_key(part) or ("id", id(part))
            if key in seen:
                continue
            seen.add(key)
            by_module[module] = by_module.get(module, 0) + _storage_bytes(part)
        return by_module

    def by_module(self) -> dict[str, int]:
        """Module qualified name -> bytes held for backward (modules that saved nothing left out)."""
        summary = self._summary if self._summary is not None else self._summarize()
        return dict(summary)

    @property
    def total_bytes(self) -> int:
        return sum(self.by_module().values())

    def table(self) -> str:
        """A text table of `by_module()`, largest first, with a total row."""
        rows = sorted(self.by_module().items(), key=lambda item: (-item[1], item[0]))
        total = sum(nbytes for _, nbytes in rows)
        names = [name or "(model)" for name, _ in rows]
        width = max([len("module"), len("total"), *map(len, names)])
        lines = [f"{'module':<{width}}  {'bytes':>12}  {'KiB':>10}  {'share':>6}"]
        for name, (_, nbytes) in zip(names, rows, strict=True):
            share = nbytes / total if total else 0.0
            lines.append(f"{name:<{width}}  {nbytes:>12,}  {nbytes / 1024:>10.1f}  {share:>6.1%}")
        lines.append(
            f"{'total':<{width}}  {total:>12,}  {total / 1024:>10.1f}  {1.0 if total else 0.0:>6.1%}"
        )
        return "\n".join(lines)
