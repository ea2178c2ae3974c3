"""Adam on a subset of a table's rows, with `torch.optim.SparseAdam`'s arithmetic bit for bit.

Lazy Adam: only rows present in a step move (their moments decay only when they are seen); the step
counter is per table and counts the steps in which the table had a gradient at all, and bias
correction uses that counter, exactly as SparseAdam's `state["step"]`. The operations, their order
and their operand types are SparseAdam's (`torch.optim._functional.sparse_adam`), so the same rows
and gradients give the same bits: `old + update` where it adds a sparse update to a dense tensor,
the step size a Python float, `grad.pow(2)`. The function works on gathered rows and returns new
rows, so where the rows live (the device, or a device cache of a host table) does not matter.
"""

from __future__ import annotations

import math

import torch


def sparse_adam_step_size(step: int, *, lr: float, beta1: float, beta2: float) -> float:
    """SparseAdam's `lr * sqrt(1 - beta2**step) / (1 - beta1**step)` for the table's `step`-th update."""
    return lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)


def adam_rows(
    weight: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    grad: torch.Tensor,
    *,
    step: int,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """New (weight, exp_avg, exp_avg_sq) rows after one SparseAdam update with `grad` (one row per
    row, duplicates already summed); the inputs are left unchanged."""
    exp_avg_update = grad.sub(exp_avg).mul_(1 - beta1)
    exp_avg_sq_update = grad.pow(2).sub_(exp_avg_sq).mul_(1 - beta2)
    new_exp_avg = exp_avg + exp_avg_update
    new_exp_avg_sq = exp_avg_sq + exp_avg_sq_update
    denom = exp_avg_sq_update.add_(exp_avg_sq).sqrt_().add_(eps)
    step_size = sparse_adam_step_size(step, lr=lr, beta1=beta1, beta2=beta2)
    new_weight = weight + (-step_size * exp_avg_update.add_(exp_avg).div_(denom))
    return new_weight, new_exp_avg, new_exp_avg_sq
