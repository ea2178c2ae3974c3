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
    return softplus_mean(-score_margins(users, pos, neg, config=config))


def bpr_loss_of_groups(
    groups: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], *, config: CompressionConfig
) -> torch.Tensor:
    """`bpr_loss` of vectors given as groups of their columns, `[(users, pos, neg), ...]`: the
    margin is the sum of the groups' margins, so each group's factors are saved their own way (a
    group of rows of a parameter as their indices, exact, where one concatenation of them with
    computed columns would be quantized whole). One group is `bpr_loss` bit for bit."""
    margin = score_margins(*groups[0], config=config)
    for group in groups[1:]:
        margin = margin + score_margins(*group, config=config)
    return softplus_mean(-margin)


def score_margins(
    users: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, *, config: CompressionConfig
) -> torch.Tensor:
    """`<u, pos> - <u, neg>` per row, the factors saved per `config.for_scores()`."""
    scores_config = config.for_scores()
    if scores_config.enabled:  # `u` and `pos - neg` saved: two factors, not three
        return ops.score_margin(users, pos, neg, config=scores_config)
    return dot_scores(users, pos, config=config) - dot_scores(users, neg, config=config)


def softplus_mean(x: torch.Tensor) -> torch.Tensor:
    """`softplus(x).mean()` with `x` saved as it is, even inside `compress_saved_tensors`."""
    with uncompressed():
        return F.softplus(x).mean()


def l2_penalty(embeddings: Sequence[torch.Tensor], *, config: CompressionConfig) -> torch.Tensor:
    """Sum of squared norms / 2, per batch row: `sum_t ||t||^2 / (2 * len(t))` (KGAT, LightGCN).

    Chunks that tile one tensor (a loss's one gather, `chunk`ed into users, positives and
    negatives) are squared as that tensor: one saved tensor instead of one per chunk (under
    compression each is stored as the gather's indices and rebuilt in backward, a few dozen
    microseconds per tensor on a step of a few milliseconds). Each square is
    `ops.sum_of_squares` (what `config` stores, without the hooks; `x.pow(2).sum()` at 32 bits).
    """
    batch = embeddings[0].shape[0]
    squares = (ops.sum_of_squares(t, config=config) for t in _tiled_bases(embeddings))
    return sum(squares) / (2 * max(batch, 1))


def _tiled_bases(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """`tensors` with each run of consecutive contiguous views that exactly tile their common base
    (in order, nothing left over) replaced by that base."""
    out: list[torch.Tensor] = []
    i = 0
    while i < len(tensors):
        base = tensors[i]._base
        j, offset = i, 0
        if base is not None and base.is_contiguous():
            while (
                j < len(tensors)
                and tensors[j]._base is base
                and tensors[j].is_contiguous()
                and tensors[j].storage_offset() - base.storage_offset() == offset
            ):
                offset += tensors[j].numel()
                j += 1
        if j > i and offset == base.numel():
            out.append(base)
            i = j
        else:
            out.append(tensors[i])
            i += 1
    return out
