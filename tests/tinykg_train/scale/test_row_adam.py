"""adam_rows_ is torch.optim.SparseAdam's update, bit for bit, on the rows a step touches."""

from __future__ import annotations

import math

import torch

from tinykg_train.scale.row_adam import adam_rows_, sparse_adam_step_size


def test_adam_rows__gives_sparse_adams_bits_over_many_steps_with_duplicate_ids():
    torch.manual_seed(0)
    n_rows, dim, lr, betas, eps = 40, 6, 0.05, (0.8, 0.99), 1e-6
    start = torch.randn(n_rows, dim)
    embedding = torch.nn.Embedding(n_rows, dim, sparse=True)
    embedding.weight.data.copy_(start)
    optimizer = torch.optim.SparseAdam(embedding.parameters(), lr=lr, betas=betas, eps=eps)
    weight, exp_avg, exp_avg_sq = start.clone(), torch.zeros_like(start), torch.zeros_like(start)
    for step in range(1, 121):
        ids = torch.randint(0, n_rows, (25,))  # duplicates on purpose: their gradients are summed
        target = torch.randn(25, dim)
        optimizer.zero_grad()
        ((embedding(ids) - target) ** 2).sum().backward()
        optimizer.step()
        grad = embedding.weight.grad.coalesce()
        rows = grad.indices()[0]
        new = [weight[rows], exp_avg[rows], exp_avg_sq[rows]]
        adam_rows_(*new, grad.values(), step=step, lr=lr, beta1=betas[0], beta2=betas[1], eps=eps)
        for tensor, values in zip((weight, exp_avg, exp_avg_sq), new, strict=True):
            tensor.index_copy_(0, rows, values)
    state = optimizer.state[embedding.weight]
    assert state["step"] == 120
    assert torch.equal(weight, embedding.weight.data)
    assert torch.equal(exp_avg, state["exp_avg"])
    assert torch.equal(exp_avg_sq, state["exp_avg_sq"])


def test_adam_rows__changes_only_the_rows_it_is_given():
    weight, grad = torch.randn(3, 4), torch.randn(3, 4)
    exp_avg, exp_avg_sq = torch.zeros(3, 4), torch.zeros(3, 4)
    grad_before = grad.clone()
    adam_rows_(weight, exp_avg, exp_avg_sq, grad, step=1, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8)
    assert torch.equal(grad, grad_before)
    assert torch.equal(exp_avg, 0.1 * grad_before)  # first step: (1 - beta1) * grad


def test_step_size_is_bias_corrected_by_the_tables_step_count():
    first = sparse_adam_step_size(1, lr=0.1, beta1=0.9, beta2=0.999)
    assert math.isclose(
        first, 0.1 * math.sqrt(0.001) / 0.1, rel_tol=1e-12
    )  # lr * sqrt(1-b2) / (1-b1)
    assert math.isclose(
        sparse_adam_step_size(10_000, lr=0.1, beta1=0.9, beta2=0.999), 0.1, rel_tol=1e-4
    )
