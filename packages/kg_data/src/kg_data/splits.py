"""Per-user train/valid/test splits for raw data that has none (KGCN, RecBole, plain tables).

Each user's interactions are ordered (by timestamp, oldest first, when every interaction has one;
else randomly with the seed) and cut: the last `round(n * test)` go to test, the `round(n * valid)`
before them to valid, the rest to train (rounding half up; a user always keeps one train item). So a
user with few interactions keeps them all in train, and with timestamps nothing from the future of
a user leaks into their training data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from kg_data.errors import KGDataError
from kg_data.schema import SPLITS


def check_ratios(split: Sequence[float]) -> tuple[float, float, float]:
    """(train, valid, test) shares: three numbers >= 0 summing to 1, train > 0."""
    try:
        ratios = tuple(float(x) for x in split)
    except (TypeError, ValueError) as exc:
        raise KGDataError(f"'split' needs to be three numbers train,valid,test (got {split!r})") from exc
    if len(ratios) != 3 or any(not math.isfinite(r) or r < 0 for r in ratios):
        raise KGDataError(f"'split' needs to be three numbers >= 0 like 0.8,0.1,0.1 (got {split!r})")
    if abs(sum(ratios) - 1.0) > 1e-6 or ratios[0] <= 0:
        raise KGDataError(f"'split' shares need to sum to 1 with a positive train share, like 0.8,0.1,0.1 (got {split!r})")
    return ratios  # type: ignore[return-value]


def split_per_user(
    interactions: pl.DataFrame, ratios: tuple[float, float, float], seed: int
) -> tuple[pl.DataFrame, dict]:
    """`interactions` (`user`, `item`, `timestamp`) with a `split` column, and how it was made."""
    _, valid_share, test_share = ratios
    by_time = interactions.height > 0 and interactions["timestamp"].null_count() == 0
    if by_time:
        key = interactions["timestamp"]
    else:
        key = pl.Series(np.random.default_rng(seed).random(interactions.height))
    ordered = (
        interactions.with_columns(_key=key)
        .with_row_index("_row")
        .sort("user", "_key", "_row")
        .with_columns(
            _pos=pl.int_range(pl.len()).over("user"),
            _n=pl.len().over("user"),
        )
        .with_columns(
            _test=(pl.col("_n") * test_share + 0.5).floor().cast(pl.Int64),
            _valid=(pl.col("_n") * valid_share + 0.5).floor().cast(pl.Int64),
        )
        .with_columns(_train=pl.max_horizontal(pl.col("_n") - pl.col("_test") - pl.col("_valid"), pl.lit(1)))
        .with_columns(_valid=pl.min_horizontal("_valid", pl.col("_n") - pl.col("_train")))
        .with_columns(
            split=pl.when(pl.col("_pos") < pl.col("_train"))
            .then(pl.lit(SPLITS[0]))
            .when(pl.col("_pos") < pl.col("_train") + pl.col("_valid"))
            .then(pl.lit(SPLITS[1]))
            .otherwise(pl.lit(SPLITS[2]))
        )
        .sort("_row")
        .drop("_key", "_row", "_pos", "_n", "_test", "_valid", "_train")
    )
    how = {
        "method": "per_user_by_timestamp" if by_time else "per_user_random",
        "ratios": dict(zip(SPLITS, ratios, strict=True)),
        "seed": None if by_time else seed,
        "rounding": "valid and test get round-half-up(n * share) of each user's n interactions, train the rest (at least 1)",
    }
    return ordered, how
