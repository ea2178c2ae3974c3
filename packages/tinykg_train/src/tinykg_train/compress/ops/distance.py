"""`squared_distance`: ||a + b - c||^2 per row (TransR's plausibility score), saving its inputs;
`translation_scores`: a TransR step's true and corrupted scores and its L2 penalty's squared norms
in one op.

Plain ops would save the difference a + b - c: one more [rows, dim] activation to store per score,
though TransR's loss already saves its inputs (the projected heads and tails for its L2 penalty;
the relation rows are parameter rows, stored as indices). This Function saves a, b and c
(compressed; a tensor compressed once in a step is shared, see `codec.compress`) and rebuilds the
difference in backward: the gradient, 2 (a + b - c) g, is linear in them, so it stays unbiased.
"""

from __future__ import annotations

from typing import Any

import torch

from tinykg_train.compress.codec import compress
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.saving import apply_compressed, load, save


def _plain(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return (a + b - c).pow(2).sum(-1)


class SquaredDistance(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a, b, c, config: CompressionConfig) -> torch.Tensor:
        save(ctx, *(compress(t, config) for t in (a, b, c)))
        ctx.shapes = (a.shape, b.shape, c.shape)
        return _plain(a, b, c)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        a, b, c = load(ctx)
        grad_difference = (a + b - c).mul_(grad.unsqueeze(-1) * 2)  # d/d(a + b - c)
        a_shape, b_shape, c_shape = ctx.shapes
        needs = ctx.needs_input_grad
        return (
            grad_difference.sum_to_size(a_shape) if needs[0] else None,
            grad_difference.sum_to_size(b_shape) if needs[1] else None,
            grad_difference.neg().sum_to_size(c_shape) if needs[2] else None,
            None,
        )


def squared_distance(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, config: CompressionConfig
) -> torch.Tensor:
    """`(a + b - c).pow(2).sum(-1)` (broadcasting); with `config.bits < 32` the inputs are saved
    compressed instead of their difference."""
    if not config.enabled:
        return _plain(a, b, c)
    return apply_compressed(SquaredDistance, a, b, c, config)


def _squared_norms(tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return sum(t.pow(2).sum() for t in tensors)  # `losses.l2_penalty`'s sum, term for term


class TranslationScores(torch.autograd.Function):
    """The five inputs saved compressed once and decoded once in backward, where two
    `squared_distance` ops and a penalty made of plain `pow`s would decode each input once per op
    that saves it (and run seven backward nodes, not one)."""

    @staticmethod
    def forward(ctx: Any, heads, relations, tails, neg_heads, neg_tails, with_norms, config):
        inputs = (heads, relations, tails, neg_heads, neg_tails)
        save(ctx, *(compress(t, config) for t in inputs))
        ctx.set_materialize_grads(False)
        true_score = _plain(heads, relations, tails)
        corrupted_score = _plain(neg_heads, relations, neg_tails)
        norms = _squared_norms(inputs) if with_norms else None
        return true_score, corrupted_score, norms

    @staticmethod
    def backward(ctx: Any, grad_true, grad_corrupted, grad_norms):
        inputs = load(ctx)
        heads, relations, tails, neg_heads, neg_tails = inputs
        grads: list[torch.Tensor | None] = [None] * 5

        def add(position: int, term: torch.Tensor) -> None:
            grads[position] = term if grads[position] is None else grads[position] + term

        for grad, (h, t, h_at, t_at) in (
            (grad_true, (heads, tails, 0, 2)),
            (grad_corrupted, (neg_heads, neg_tails, 3, 4)),
        ):
            if grad is not None:  # d/d(h + r - t) of ||h + r - t||^2, times the score's gradient
                difference = (h + relations - t).mul_(grad.unsqueeze(-1) * 2)
                add(h_at, difference)
                add(1, difference)
                add(t_at, difference.neg())
        if grad_norms is not None:
            for position, x in enumerate(inputs):
                add(position, x * (grad_norms * 2))
        needs = ctx.needs_input_grad
        return (*(g if needs[i] else None for i, g in enumerate(grads)), None, None)


def translation_scores(
    heads: torch.Tensor,
    relations: torch.Tensor,
    tails: torch.Tensor,
    neg_heads: torch.Tensor,
    neg_tails: torch.Tensor,
    *,
    with_norms: bool,
    config: CompressionConfig,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """`(||h + r - t||^2, ||h' + r - t'||^2)` per row and, `with_norms`, the sum of the squared
    norms of all five inputs (what TransR's L2 penalty scales), else None. All inputs `[rows, dim]`.

    With `config.bits < 32` the inputs are saved compressed, each once (a tensor another op saved
    in the step is shared, see `codec.compress`), and decoded once in backward; every gradient is
    linear in them, so it stays unbiased. At 32 bits, the plain ops.
    """
    inputs = (heads, relations, tails, neg_heads, neg_tails)
    if any(t.shape != heads.shape for t in inputs) or heads.dim() != 2:
        raise ValueError(
            "translation_scores needs five [rows, dim] tensors of one shape (got "
            f"{[tuple(t.shape) for t in inputs]})"
        )
    if not config.enabled:
        norms = _squared_norms(inputs) if with_norms else None
        return _plain(heads, relations, tails), _plain(neg_heads, relations, neg_tails), norms
    return apply_compressed(TranslationScores, *inputs, bool(with_norms), config)
