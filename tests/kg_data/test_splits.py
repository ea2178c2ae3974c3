"""Per-user splits: shares and rounding, time order, determinism by seed, argument checks."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kg_data.errors import KGDataError
from kg_data.splits import check_ratios, split_per_user


def frame(degrees: dict[int, int], timestamps: bool = False) -> pl.DataFrame:
    users = np.repeat(list(degrees), list(degrees.values()))
    items = np.concatenate([np.arange(n) for n in degrees.values()])
    ts = items.astype(float) if timestamps else [None] * len(items)
    return pl.DataFrame({"user": users, "item": items, "timestamp": pl.Series(ts, dtype=pl.Float64)})


@pytest.mark.parametrize(
    ("n", "expected"),
    [(1, (1, 0, 0)), (2, (2, 0, 0)), (5, (3, 1, 1)), (10, (8, 1, 1)), (14, (12, 1, 1)), (15, (11, 2, 2))],
)
def test_each_user_is_cut_by_rounded_shares(n: int, expected: tuple[int, int, int]) -> None:
    split, how = split_per_user(frame({0: n}), (0.8, 0.1, 0.1), seed=0)
    counts = tuple(int((split["split"] == s).sum()) for s in ("train", "valid", "test"))
    assert counts == expected
    assert how["method"] == "per_user_random" and how["seed"] == 0


def test_timestamps_put_the_newest_interactions_in_test() -> None:
    data = frame({0: 10, 1: 20}, timestamps=True).sample(fraction=1.0, shuffle=True, seed=3)
    split, how = split_per_user(data, (0.8, 0.1, 0.1), seed=0)
    assert how["method"] == "per_user_by_timestamp"
    for user, n in ((0, 10), (1, 20)):
        mine = split.filter(pl.col("user") == user)
        newest_train = mine.filter(pl.col("split") == "train")["timestamp"].max()
        assert newest_train < mine.filter(pl.col("split") != "train")["timestamp"].min()
        assert mine.filter(pl.col("split") == "test")["timestamp"].min() == n - round(n * 0.1)


def test_rows_keep_their_order_and_random_splits_follow_the_seed() -> None:
    data = frame({u: 30 for u in range(20)})
    a, _ = split_per_user(data, (0.8, 0.1, 0.1), seed=7)
    b, _ = split_per_user(data, (0.8, 0.1, 0.1), seed=7)
    c, _ = split_per_user(data, (0.8, 0.1, 0.1), seed=8)
    assert a.select("user", "item").equals(data.select("user", "item"))
    assert a["split"].equals(b["split"])
    assert not a["split"].equals(c["split"])


@pytest.mark.parametrize("bad", [(0.8, 0.1), (0.5, 0.5, 0.5), (0.0, 0.5, 0.5), (1.1, -0.1, 0.0), ("a", 1, 2)])
def test_bad_ratios_are_refused(bad: tuple) -> None:
    with pytest.raises(KGDataError, match="'split'"):
        check_ratios(bad)


def test_ratios_accept_any_sequence() -> None:
    assert check_ratios([0.7, 0.2, 0.1]) == (0.7, 0.2, 0.1)
