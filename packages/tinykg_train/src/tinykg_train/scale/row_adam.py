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


def adam_rows_(
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
) -> None:
    """One SparseAdam update of gathered rows, in place: `weight`, `exp_avg`, `exp_avg_sq` are the
    rows' copies [n, dim] (not views of the tables), `grad` their gradient, duplicates summed.

    In place because a step's rows are large (20k x 64 floats is 5 MB a tensor) and fresh buffers
    that size cost page faults on the CPU; every value is SparseAdam's: `old + update` is the same
    float as SparseAdam's `update + old`, and its denominator is the new second moment's root.
    """
    exp_avg_update = grad.sub(exp_avg).mul_(1 - beta1)
    exp_avg_sq_update = grad.pow(2).sub_(exp_avg_sq).mul_(1 - beta2)
    exp_avg.add_(exp_avg_update)
    exp_avg_sq.add_(exp_avg_sq_update)
    denom = torch.sqrt(exp_avg_sq, out=exp_avg_sq_update).add_(eps)
    step_size = sparse_adam_step_size(step, lr=lr, beta1=beta1, beta2=beta2)
    weight.add_(torch.div(exp_avg, denom, out=exp_avg_update).mul_(-step_size))
