"""An optimizer base that does not load torch's compiler into a process that compiles nothing.

torch wraps `Optimizer.add_param_group`, `zero_grad`, `state_dict` and `load_state_dict` (and the
`step` of its own optimizers) so that their first call imports `torch._dynamo`, which keeps a
compiled graph from tracing into them. That import brings inductor and, where it is installed,
Triton: 143 MiB more resident memory (72 + 71, measured on this stack) in every CPU training
process, at every phase of it, though nothing there compiles.

While `torch._dynamo` is not loaded, no compiled region can be running, so the wrapper has nothing
to do: `EagerOptimizer` then calls the methods' own code, and torch's wrapped methods once
anything else has loaded the compiler. What the methods do is torch's either way.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

_COMPILER = "torch._dynamo"


def _torch_method(name: str):
    """`torch.optim.Optimizer.<name>`, without torch's dynamo-disabling wrapper while the compiler
    is not loaded (the wrapper's `__wrapped__` is the method's own code)."""
    method = getattr(torch.optim.Optimizer, name)
    if _COMPILER in sys.modules:
        return method
    return getattr(method, "__wrapped__", method)


class EagerOptimizer(torch.optim.Optimizer):
    """`torch.optim.Optimizer` whose bookkeeping methods leave `torch._dynamo` unimported (module
    docstring). A subclass writes its `step` without torch's `_use_grad` wrapper, which imports
    it too (`@torch.no_grad()` does what it does outside compiled code)."""

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _torch_method("add_param_group")(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _torch_method("zero_grad")(self, set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return _torch_method("state_dict")(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _torch_method("load_state_dict")(self, state_dict)
