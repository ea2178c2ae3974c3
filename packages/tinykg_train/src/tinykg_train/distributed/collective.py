"""The few collectives data-parallel training needs, on the process group Ray Train sets up.

Gradients are all-reduced explicitly rather than through `DistributedDataParallel`: the trainer
calls the models' `loss`/`kg_loss`, not `forward`, so DDP's hooks would never fire. One flat buffer
per step holds every gradient and the loss, each pre-multiplied by this worker's share of the
global batch, so one `all_reduce(SUM)` yields the global batch's mean gradient and loss on every
worker. gloo on the CPU, NCCL on GPUs (tensors on the model's device; objects travel through
`torch.distributed`'s object collectives, which need the CUDA device set on NCCL).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

from tinykg_train.errors import TinyKGError


def average_gradients(
    parameters: Iterable[torch.nn.Parameter], loss: torch.Tensor, weight: float
) -> torch.Tensor:
    """Replace every `.grad` by the weighted sum over workers of `weight * grad`; return the same
    weighted sum of `loss` (with weights = each worker's share of the batch: the global mean).

    Parameters whose `.grad` is None are left out; which ones those are follows from the model's
    code path, not the data, so it is the same on every worker (the buffer sizes must agree).
    """
    with_grad = [p for p in parameters if p.grad is not None]
    for parameter in with_grad:
        if parameter.grad.is_sparse:
            raise TinyKGError(
                "data-parallel training all-reduces dense gradients; this model has a sparse one "
                "(an nn.Embedding with sparse=True?): make it dense or train with workers: 1"
            )
    pieces = [p.grad.reshape(-1) for p in with_grad]
    pieces.append(loss.detach().reshape(1).to(pieces[0].dtype if pieces else loss.dtype))
    flat = torch.cat(pieces).mul_(weight)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for parameter in with_grad:
        size = parameter.grad.numel()
        parameter.grad.copy_(flat[offset : offset + size].view_as(parameter.grad))
        offset += size
    return flat[-1].to(loss.dtype)


def broadcast_parameters(module: torch.nn.Module) -> None:
    """Give every worker rank 0's parameters (as DDP does), whatever each one's initialization drew.

    Buffers (graphs, sampled neighbors) are built from the dataset and the seed, the same on every
    worker; `Replica.check_same_run` checks the dataset and settings agree.
    """
    for parameter in module.parameters():
        dist.broadcast(parameter.data, src=0)


def broadcast_object(value: Any) -> Any:
    """Rank 0's `value` on every rank (pickled; small things only: metrics, flags)."""
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(value: Any) -> list[Any]:
    """Every rank's `value`, indexed by rank, on every rank."""
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered
