"""Per-user train/valid/test splits, for raw data that has none or when a split method is asked for.

Each user's distinct interactions are put in order and cut: the first part goes to train, the next to
valid, the last to test. The order (`SplitOptions.method`):

- "time": by timestamp, oldest first (ties in file order), so nothing from a user's future leaks into
  their training data; every interaction needs a timestamp.
- "random": by a random number drawn, with the seed, for each raw row in file order.
- "auto" (default): splits given in the data (KGAT files, a `split` column) are kept; otherwise
  "time" when every interaction has a timestamp, else "random".

How many of a user's n interactions go where, with shares (train, valid, test) (`rounding`):

- "half-up" (default): valid = floor(n * valid + 1/2) and test = floor(n * test + 1/2); train keeps
  the rest, but at least one interaction (valid gives way first, then test).
- "down", as RecBole's `split_by_ratio` grouped by user: the shares are divided by their sum; valid =
  floor(n * valid) and test = floor(n * test), train the rest. Then a part whose exact size n * share
  lies strictly between 0 and 1 (so it got none) takes one interaction from train, test first, then
  valid, each only while train still holds at least two. With (0.8, 0.1, 0.1): n = 2 gives 1/0/1,
  n = 3 gives 1/1/1, n = 15 gives 13/1/1 (half-up: 2/0/0, 3/0/0, 11/2/2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from kg_data.errors import KGDataError
from kg_data.schema import SPLITS

SPLIT_METHODS = ("auto", "random", "time")
ROUNDINGS = ("half-up", "down")
#: `split` values of `metadata.json` per method actually used.
METHOD_NAMES = {"random": "per_user_random", "time": "per_user_by_timestamp"}


def check_ratios(split: Sequence[float]) -> tuple[float, float, float]:
    """(train, valid, test) shares: three numbers >= 0 summing to 1, train > 0."""
    try:
        ratios = tuple(float(x) for x in split)
    except (TypeError, ValueError) as exc:
        raise KGDataError(f"split ratios need to be three numbers train,valid,test like 0.8,0.1,0.1 (got {split!r})") from exc
    if len(ratios) != 3 or any(not math.isfinite(r) or r < 0 for r in ratios):
        raise KGDataError(f"split ratios need to be three numbers >= 0 like 0.8,0.1,0.1 (got {split!r})")
    if abs(sum(ratios) - 1.0) > 1e-6 or ratios[0] <= 0:
        raise KGDataError(f"split ratios need to sum to 1 with a positive train share, like 0.8,0.1,0.1 (got {split!r})")
    return ratios  # type: ignore[return-value]


@dataclass(frozen=True)
class SplitOptions:
    """How ingest splits interactions per user (see the module docstring); checked when built."""

    method: str = "auto"
    ratios: tuple[float, float, float] = (0.8, 0.1, 0.1)
    rounding: str = "half-up"
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or self.method not in SPLIT_METHODS:
            hint = "; give the shares as split ratios (--split-ratios 0.8,0.1,0.1)" if not isinstance(self.method, str) or "," in self.method else ""
            raise KGDataError(f"split method {self.method!r} is unknown; choose one of {', '.join(SPLIT_METHODS)}{hint}")
        if self.rounding not in ROUNDINGS:
            raise KGDataError(f"split rounding {self.rounding!r} is unknown; choose half-up (ingest's) or down (RecBole's)")
        object.__setattr__(self, "ratios", check_ratios(self.ratios))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int | np.integer):
            raise KGDataError(f"split seed needs to be an integer (got {self.seed!r})")

    def describe(self, method: str) -> dict:
        """What `metadata.json` records of a split made with `method` ("random" or "time")."""
        return {
            "method": METHOD_NAMES[method],
            "requested": self.method,
            "ratios": dict(zip(SPLITS, self.ratios, strict=True)),
            "rounding": self.rounding,
            "seed": self.seed if method == "random" else None,
        }


def part_sizes(n: pl.Expr, ratios: tuple[float, float, float], rounding: str) -> tuple[pl.Expr, pl.Expr]:
    """(train, valid) sizes of a user with `n` interactions (test is the rest), as expressions."""
    _, valid_share, test_share = ratios
    if rounding == "half-up":
        test = (n * test_share + 0.5).floor().cast(pl.Int64)
        valid = (n * valid_share + 0.5).floor().cast(pl.Int64)
        train = pl.max_horizontal(n - test - valid, pl.lit(1))
        return train, pl.min_horizontal(valid, n - train)
    total = sum(ratios)  # RecBole normalizes the shares the same way
    exact_valid, exact_test = n.cast(pl.Float64) * (valid_share / total), n.cast(pl.Float64) * (test_share / total)
    valid, test = exact_valid.floor().cast(pl.Int64), exact_test.floor().cast(pl.Int64)
    train = n - valid - test
    test_bump = ((train > 1) & (exact_test > 0) & (exact_test < 1)).cast(pl.Int64)
    train = train - test_bump
    valid_bump = ((train > 1) & (exact_valid > 0) & (exact_valid < 1)).cast(pl.Int64)
    return train - valid_bump, valid + valid_bump


def assign_splits(frame: pl.DataFrame, ratios: tuple[float, float, float], rounding: str) -> pl.DataFrame:
    """`frame` (`user`, `_key`, `_row`, ...) with `_rank` (0/1/2 = train/valid/test, Int8): each user's
    rows ordered by `_key` then `_row` and cut by `part_sizes`. Rows come back sorted by user, key, row."""
    ordered = frame.sort("user", "_key", "_row")
    train, valid = part_sizes(pl.len().over("user"), ratios, rounding)
    position = pl.int_range(pl.len()).over("user")
    return ordered.with_columns(_train=train, _valid=valid).with_columns(
        _rank=pl.when(position < pl.col("_train"))
        .then(pl.lit(0, pl.Int8))
        .when(position < pl.col("_train") + pl.col("_valid"))
        .then(pl.lit(1, pl.Int8))
        .otherwise(pl.lit(2, pl.Int8))
    ).drop("_train", "_valid")


def random_keys(seed: int) -> Callable[[int], np.ndarray]:
    """Draws `n` uniform numbers at a time from one stream: called on consecutive batches of rows it
    gives each row the same number as one call over all rows would, whatever the batch sizes."""
    rng = np.random.default_rng(seed)
    return rng.random


def resolve_method(options: SplitOptions, rows: int, rows_with_timestamp: int, source_format: str) -> str:
    """"random" or "time" for data without given splits (or re-split on request); refuses "time"
    when an interaction has no timestamp."""
    every_row_timed = rows > 0 and rows_with_timestamp == rows
    if options.method == "auto":
        return "time" if every_row_timed else "random"
    if options.method == "time" and not every_row_timed:
        raise KGDataError(
            f"split method 'time' needs a timestamp on every interaction, but {rows - rows_with_timestamp:,} of "
            f"{rows:,} have none ({source_format} data); use --split random (or auto)"
        )
    return options.method


def split_per_user(interactions: pl.DataFrame, options: SplitOptions | None = None) -> tuple[pl.DataFrame, dict]:
    """`interactions` (`user`, `item`, `timestamp`), distinct pairs, with a `split` column added, in
    their order, and how it was made (in memory: the building block ingest runs per bucket of users)."""
    options = options or SplitOptions()
    method = resolve_method(options, interactions.height, interactions["timestamp"].drop_nulls().len(), "these")
    key = interactions["timestamp"] if method == "time" else pl.Series(random_keys(options.seed)(interactions.height))
    split = assign_splits(interactions.with_columns(_key=key).with_row_index("_row"), options.ratios, options.rounding)
    result = split.sort("_row").with_columns(split=rank_names(pl.col("_rank")))
    return result.drop("_key", "_row", "_rank"), options.describe(method)


def rank_names(rank: pl.Expr) -> pl.Expr:
    """0/1/2 -> "train"/"valid"/"test"."""
    return rank.replace_strict(dict(enumerate(SPLITS)), return_dtype=pl.String)
