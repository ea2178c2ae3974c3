"""Losses shared by the models: BPR on dot-product scores, and the L2 penalty on touched embeddings."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from tinykg_train.compress import CompressionConfig, ops, uncompressed


def dot_scores(a: torch.Tensor, b: torch.Tensor, *, config: CompressionConfig) -> torch.Tensor:
    """Row-wise dot products `(a * b).sum(-1)`, the factors saved per `config.for_scores()` (at
    least `score_bits` wide: every gradient of the step starts from them)."""
    scores_config = config.for_scores()
    if not scores_config.enabled:
        with uncompressed():  # also past the hooks of an INT2 `compress_saved_tensors`
            return (a * b).sum(dim=-1)
    return ops.mul(a, b, config=scores_config).sum(dim=-1)


def bpr_loss(
    users: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, *, config: CompressionConfig
) -> torch.Tensor:
    """Mean of -log sigmoid(<u, pos> - <u, neg>) over the batch (Rendle et al. 2009).

    The margins are saved uncompressed: softplus's gradient is nonlinear in them, so rounding would
    bias it (they are one float per pair).
    """
    scores_config = config.for_scores()
    if scores_config.enabled:  # `u` and `pos - neg` saved: two factors, not four
        margin = ops.score_margin(users, pos, neg, config=scores_config)
    else:
        margin = dot_scores(users, pos, config=config) - dot_scores(users, neg, config=config)
    return softplus_mean(-margin)


def softplus_mean(x: torch.Tensor) -> torch.Tensor:
    """`softplus(x).mean()` with `x` saved as it is, even inside `compress_saved_tensors`."""
    with uncompressed():
        return F.softplus(x).mean()


def l2_penalty(embeddings: Sequence[torch.Tensor]) -> torch.Tensor:
    """Sum of squared norms / 2, per batch row: `sum_t ||t||^2 / (2 * len(t))` (KGAT, LightGCN)."""
    batch = embeddings[0].shape[0]
    return sum(t.pow(2).sum() for t in embeddings) / (2 * max(batch, 1))
