"""Top-K ranking metrics (Recall@K, NDCG@K) for many K at once, from one ranked hit matrix.

The evaluator ranks every user's candidate items once, at the largest K, and marks which ranked items
are relevant (`hits`). Every smaller K is then a prefix of that ranking, so a cumulative sum over the
rank positions yields all cut-offs in one pass (the way RecBole computes them).

Definitions (binary relevance, `n_relevant` = the user's held-out items that could be ranked):
- Recall@K = (relevant items in the top K) / n_relevant
- NDCG@K = DCG@K / IDCG@K, DCG@K = sum over top-K positions p (0-based) of hit_p / log2(p + 2),
  IDCG@K = the DCG of a perfect ranking = sum_{p < min(n_relevant, K)} 1 / log2(p + 2).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch


def metric_names(ks: Iterable[int]) -> list[str]:
    """The keys `ranking_metrics` returns, e.g. ["recall@20", "ndcg@20"]."""
    return [f"{name}@{k}" for k in ks for name in ("recall", "ndcg")]


def position_discounts(
    length: int, dtype: torch.dtype = torch.float64, device=None
) -> torch.Tensor:
    """1 / log2(p + 2) for rank positions p = 0..length-1."""
    positions = torch.arange(length, dtype=dtype, device=device)
    return 1.0 / torch.log2(positions + 2.0)


def ranking_metrics(
    hits: torch.Tensor, n_relevant: torch.Tensor, ks: Sequence[int]
) -> dict[str, torch.Tensor]:
    """Per-user Recall@K and NDCG@K for every K in `ks`.

    hits: [users, L] bool, True where the item ranked at that position is relevant; L >= max(ks)
        (pad with False when fewer items than K could be ranked).
    n_relevant: [users] number of relevant items per user (> 0).
    Returns {"recall@K": [users] float64, "ndcg@K": [users] float64} for each K.
    """
    if hits.dim() != 2:
        raise ValueError(f"'hits' needs shape [users, positions] (got {tuple(hits.shape)})")
    if not ks or min(ks) <= 0:
        raise ValueError(f"'ks' needs positive cut-offs (got {list(ks)})")
    if hits.shape[1] < max(ks):
        raise ValueError(
            f"'hits' has {hits.shape[1]} positions, fewer than the largest K={max(ks)}"
        )
    if n_relevant.shape != hits.shape[:1]:
        raise ValueError(
            f"'n_relevant' needs shape [{hits.shape[0]}] (got {tuple(n_relevant.shape)})"
        )
    if n_relevant.numel() and int(n_relevant.min()) <= 0:
        raise ValueError("every user needs at least one relevant item (drop users with none first)")

    length = max(ks)
    hits = hits[:, :length].to(torch.float64)
    n_relevant = n_relevant.to(device=hits.device, dtype=torch.int64)
    discounts = position_discounts(length, device=hits.device)
    hits_upto = hits.cumsum(dim=1)  # [users, L]: relevant items within the top p+1
    dcg_upto = (hits * discounts).cumsum(dim=1)
    ideal_upto = discounts.cumsum(dim=0)  # IDCG when the user has at least p+1 relevant items

    out: dict[str, torch.Tensor] = {}
    for k in ks:
        ideal = ideal_upto[n_relevant.clamp(max=k) - 1]
        out[f"recall@{k}"] = hits_upto[:, k - 1] / n_relevant.to(torch.float64)
        out[f"ndcg@{k}"] = dcg_upto[:, k - 1] / ideal
    return out
