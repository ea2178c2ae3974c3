"""`compress_saved_tensors`: compress whatever autograd saves, for any model (GACT-style).

Inside the block, every tensor autograd saves for backward is stored per the config: float tensors of
at least `min_numel` elements quantized (`codec.compress`), bool tensors bit-packed, integer tensors
kept; parameters and module buffers are kept as they are (they persist anyway, so a compressed copy
would only add memory and error). A tensor saved twice is stored once. Tensors that the ops of
`tinykg_train.compress.ops` already compressed pass through.

ReLU outputs (a ReLU saves its output and reads `result > 0` in backward) also keep a 1-bit sign
mask, so that mask stays exact. Ops that branch on the sign of a saved *input* (LeakyReLU, ...) cannot
be recognised from the tensor: near zero their gradient may take the other branch. Use
`ops.leaky_relu` (exact 1-bit mask) in models; hooks mode is the fallback for everything else.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from tinykg_train.compress import stack
from tinykg_train.compress.codec import compress, worth_compressing
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.masks import PackedMask

# Nodes that save their output and branch on its sign in backward (`result > 0`).
_SIGN_READING_OUTPUTS = frozenset({"ReluBackward0", "ReluBackward1"})


def _is_relu_output(tensor: torch.Tensor) -> bool:
    return type(tensor.grad_fn).__name__ in _SIGN_READING_OUTPUTS


def hooks_would_compress(tensor: torch.Tensor, config: CompressionConfig) -> bool:
    """Whether `compress_saved_tensors` stores `tensor` in another form (bit-packed or quantized)."""
    if not config.enabled or tensor.layout != torch.strided:
        return False
    if tensor.dtype == torch.bool:
        return tensor.numel() >= max(config.min_numel, 1)
    return worth_compressing(tensor, config)


class Compressor(stack.SavedTensorLayer):
    """The encoding layer of `compress_saved_tensors` (the innermost one encodes; bits=32: off)."""

    encodes = True

    def __init__(self, config: CompressionConfig) -> None:
        self.config = config

    def encode(self, tensor: torch.Tensor) -> Any:
        if not hooks_would_compress(tensor, self.config):
            return tensor
        if tensor.dtype == torch.bool:
            return stack.cached("mask", tensor, PackedMask.pack)
        return compress(tensor, self.config, exact_positives=_is_relu_output(tensor))


def _register_module_tensors(module: torch.nn.Module, args: Any) -> None:
    """Forward pre-hook: the parameters and buffers of a module about to run are persistent (also
    a buffer the module re-assigned since the block began)."""
    stack.add_persistent(
        t for t in (*module._parameters.values(), *module._buffers.values()) if t is not None
    )


@contextlib.contextmanager
def _module_hooks(model: torch.nn.Module | None) -> Iterator[None]:
    """The pre-hook on `model`'s own modules only; without a model, on every module that runs.

    Without `model` the modules that will run inside the block are unknown until they run, and torch
    tells a hook about "any module that runs" only through its process-wide registry: so that case
    installs a global pre-hook for the block's duration (it does nothing on threads that have no
    block of their own). Pass `model` (the trainer does) and no module outside it gets a hook.
    """
    if model is None:
        handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(_register_module_tensors)
        ]
    else:
        handles = [m.register_forward_pre_hook(_register_module_tensors) for m in model.modules()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def compress_saved_tensors(
    config: CompressionConfig, model: torch.nn.Module | None = None
) -> Iterator[None]:
    """Store the tensors autograd saves in this block compressed per `config`.

    `model` (optional; the module that runs inside the block, e.g. the whole model) names the
    persistent tensors up front and scopes the pre-hook that recognises buffers re-assigned while it
    runs to its own modules. Without it, the parameters and buffers of every module called inside
    the block are recognised as they run, through a process-wide hook (see `_module_hooks`). A
    plain tensor attribute that is neither (a graph kept outside any module), or a buffer of a
    module outside `model`, is treated as an activation. With `config.bits == 32` nothing is
    compressed (an `ActivationMeter` inside still counts).
    """
    persistent = stack.model_storages(model) if model is not None else set()
    with _module_hooks(model), stack.pushed(Compressor(config), persistent):
        yield


class _OpsOnly(stack.SavedTensorLayer):
    """`through_ops_only`'s layer: it stores nothing differently, and while a meter's hooks run (a
    measured step) it notes each activation saved outside the compressed ops that
    `compress_saved_tensors` would have compressed (stored as it is here)."""

    def __init__(self, config: CompressionConfig) -> None:
        self.config = config
        self.strays: list[str] = []

    def observe(self, tensor: torch.Tensor, stored: Any) -> None:
        if stack.in_compressed_op() or stack.encoder_active() or stack.is_persistent(tensor):
            return
        if hooks_would_compress(tensor, self.config):
            node = type(tensor.grad_fn).__name__ if tensor.grad_fn is not None else "a leaf"
            self.strays.append(f"{tuple(tensor.shape)} {tensor.dtype} from {node}")


@contextlib.contextmanager
def through_ops_only(model: torch.nn.Module) -> Iterator[None]:
    """The scope of `compress_saved_tensors(model.compression, model)` without its saved-tensor
    hooks, for a model whose every activation saved for backward goes through
    `tinykg_train.compress.ops` (`Recommender.saves_through_ops`): those ops compress what they save
    themselves, and a tensor saved by several of them is still stored once (the scope's cache);
    nothing else pays the hooks' Python per saved tensor (index tensors, parameters, ops' own
    parts). An `ActivationMeter` inside still counts every saved tensor, and if one of them was an
    activation saved outside the ops (a subclass's extra torch op), the model's
    `saves_through_ops` is turned off with a warning: its later steps use the hooks."""
    layer = _OpsOnly(model.compression)
    with stack.pushed(layer, stack.model_storages(model), hooks=False):
        yield
    if layer.strays and getattr(model, "saves_through_ops", False):
        model.saves_through_ops = False
        warnings.warn(
            f"{type(model).__name__} saved {len(layer.strays)} activation(s) outside "
            f"tinykg_train.compress.ops ({layer.strays[0]}), stored uncompressed: its later steps "
            "run inside compress_saved_tensors. Route the op through compress.ops, or set "
            "saves_through_ops = False on the class",
            RuntimeWarning,
            stacklevel=3,
        )


@contextlib.contextmanager
def uncompressed() -> Iterator[None]:
    """Tensors saved in this block are stored as they are, even inside `compress_saved_tensors`.

    For the few small tensors whose gradient is a nonlinear function of what is saved, such as the
    score margins under a loss's softplus (backward: sigmoid of the saved input): rounding them would
    bias the gradient, and they are a negligible share of the memory. An `ActivationMeter` still
    counts them.
    """
    with stack.pushed(Compressor(CompressionConfig(bits=32)), set()):
        yield
