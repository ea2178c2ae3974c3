"""`recomputed`: a small subgraph that saves only its inputs and runs again in backward.

Some losses build many intermediates from a few small inputs: KGIN's independence penalty turns each
intent (a row of an `[intents, relations]` parameter) into a `[relations, relations]` distance
matrix and runs a dozen ops on them. Under `compress_saved_tensors` every one of those saved
matrices is quantized in forward and dequantized in backward (dozens of quantizations and decodes
a step, for a penalty of a few hundred floats of input), and the gradient of the
square roots and normalizations is nonlinear in what was rounded. This Function keeps only the
inputs (parameters or their rows: held anyway) and reruns the subgraph in backward with plain
autograd, uncompressed: nothing quantized, the exact gradient, for one more forward of a small
computation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.saving import apply_compressed, load, save


def _as_kept(tensor: torch.Tensor) -> torch.Tensor:
    # a detached alias, not the tensor: a saved output would otherwise hold its own grad_fn
    return tensor.detach()


class Recomputed(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, function: Callable[..., torch.Tensor], *inputs: torch.Tensor):
        save(ctx, *inputs)  # through apply_compressed: stored as they are
        ctx.function = function
        return function(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        needs = ctx.needs_input_grad[1:]
        inputs = [x.detach().requires_grad_(need) for x, need in zip(load(ctx), needs, strict=True)]
        # innermost hooks win: what this rerun saves is kept as it is, without a trip through the
        # compression stack's hooks (the rerun's graph lives only until the next line)
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(_as_kept, _as_kept):
            out = ctx.function(*inputs)
        wanted = [x for x in inputs if x.requires_grad]
        grads = iter(torch.autograd.grad(out, wanted, grad, allow_unused=True))
        return (None, *(next(grads) if x.requires_grad else None for x in inputs))


def recomputed(
    function: Callable[..., torch.Tensor], *inputs: torch.Tensor, config: CompressionConfig
) -> torch.Tensor:
    """`function(*inputs)`; with `config.bits < 32` only `inputs` are saved and backward runs
    `function` again (deterministic, tensor inputs, one tensor out). For small inputs that fan out
    into many saved intermediates; at 32 bits, plain autograd."""
    if not config.enabled:
        return function(*inputs)
    return apply_compressed(Recomputed, function, *inputs)
