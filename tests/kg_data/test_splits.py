"""Per-user splits: shares and both roundings, time order, determinism by seed, argument checks."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kg_data.errors import KGDataError
from kg_data.splits import SplitOptions, check_ratios, part_sizes, split_per_user


def frame(degrees: dict[int, int], timestamps: bool = False) -> pl.DataFrame:
    users = np.repeat(list(degrees), list(degrees.values()))
    items = np.concatenate([np.arange(n) for n in degrees.values()])
    ts = items.astype(float) if timestamps else [None] * len(items)
    return pl.DataFrame({"user": users, "item": items, "timestamp": pl.Series(ts, dtype=pl.Float64)})


def counts(split: pl.DataFrame) -> tuple[int, int, int]:
    return tuple(int((split["split"] == s).sum()) for s in ("train", "valid", "test"))


def recbole_counts(n: int, ratios: tuple[float, float, float]) -> tuple[int, int, int]:
    """RecBole's per-group counts, written out from its documented rule (floor valid and test, train
    the rest; a part with 0 < n * share < 1 takes one from train, test first, while train >= 2)."""
    shares = [r / sum(ratios) for r in ratios]
    cnt = [int(shares[0] * n), int(shares[1] * n), int(shares[2] * n)]
    cnt[0] = n - cnt[1] - cnt[2]
    for part in (2, 1):
        if cnt[0] <= 1:
            break
        if 0 < shares[part] * n < 1:
            cnt[part] += 1
            cnt[0] -= 1
    return cnt[0], cnt[1], cnt[2]


@pytest.mark.parametrize(
    ("n", "expected"),
    [(1, (1, 0, 0)), (2, (2, 0, 0)), (3, (3, 0, 0)), (5, (3, 1, 1)), (10, (8, 1, 1)), (14, (12, 1, 1)), (15, (11, 2, 2)), (19, (15, 2, 2))],
)
def test_half_up_rounding_cuts_each_user_by_rounded_shares(n: int, expected: tuple[int, int, int]) -> None:
    split, how = split_per_user(frame({0: n}), SplitOptions(ratios=(0.8, 0.1, 0.1), seed=0))
    assert counts(split) == expected
    assert how["method"] == "per_user_random" and how["seed"] == 0 and how["rounding"] == "half-up"


@pytest.mark.parametrize(
    ("n", "expected"),
    [(1, (1, 0, 0)), (2, (1, 0, 1)), (3, (1, 1, 1)), (5, (3, 1, 1)), (10, (8, 1, 1)), (14, (12, 1, 1)), (15, (13, 1, 1)), (19, (17, 1, 1)), (20, (16, 2, 2))],
)
def test_down_rounding_matches_recbole_per_user_counts(n: int, expected: tuple[int, int, int]) -> None:
    split, how = split_per_user(frame({0: n}), SplitOptions(ratios=(0.8, 0.1, 0.1), rounding="down"))
    assert counts(split) == expected == recbole_counts(n, (0.8, 0.1, 0.1))
    assert how["rounding"] == "down"


@pytest.mark.parametrize("ratios", [(0.8, 0.1, 0.1), (0.7, 0.2, 0.1), (0.6, 0.2, 0.2), (0.9, 0.0, 0.1), (0.5, 0.25, 0.25)])
def test_down_rounding_matches_recbole_for_every_user_size(ratios: tuple[float, float, float]) -> None:
    sizes = pl.DataFrame({"n": np.arange(1, 200)})
    train, valid = part_sizes(pl.col("n"), ratios, "down")
    got = sizes.select(train=train, valid=valid, test=pl.col("n") - train - valid).rows()
    assert got == [recbole_counts(n, ratios) for n in range(1, 200)]


def test_each_user_is_split_on_its_own_count() -> None:
    split, _ = split_per_user(frame({0: 3, 1: 15, 2: 2}), SplitOptions(rounding="down"))
    per_user = {u: counts(split.filter(pl.col("user") == u)) for u in (0, 1, 2)}
    assert per_user == {0: (1, 1, 1), 1: (13, 1, 1), 2: (1, 0, 1)}


def test_timestamps_put_the_newest_interactions_in_test() -> None:
    data = frame({0: 10, 1: 20}, timestamps=True).sample(fraction=1.0, shuffle=True, seed=3)
    split, how = split_per_user(data, SplitOptions())
    assert how["method"] == "per_user_by_timestamp" and how["seed"] is None
    for user, n in ((0, 10), (1, 20)):
        mine = split.filter(pl.col("user") == user)
        newest_train = mine.filter(pl.col("split") == "train")["timestamp"].max()
        assert newest_train < mine.filter(pl.col("split") != "train")["timestamp"].min()
        assert mine.filter(pl.col("split") == "test")["timestamp"].min() == n - round(n * 0.1)


def test_random_method_ignores_timestamps_and_time_method_needs_them() -> None:
    timed = frame({0: 30}, timestamps=True)
    split, how = split_per_user(timed, SplitOptions(method="random", seed=1))
    assert how["method"] == "per_user_random"
    assert split.filter(pl.col("split") == "test")["timestamp"].to_list() != [27.0, 28.0, 29.0]
    untimed = frame({0: 30}).with_columns(timestamp=pl.when(pl.col("item") < 29).then(pl.col("item").cast(pl.Float64)))
    with pytest.raises(KGDataError, match="split method 'time' needs a timestamp on every interaction, but 1 of 30 have none"):
        split_per_user(untimed, SplitOptions(method="time"))
    assert split_per_user(untimed, SplitOptions())[1]["method"] == "per_user_random"  # auto falls back


def test_rows_keep_their_order_and_random_splits_follow_the_seed() -> None:
    data = frame({u: 30 for u in range(20)})
    a, _ = split_per_user(data, SplitOptions(seed=7))
    b, _ = split_per_user(data, SplitOptions(seed=7))
    c, _ = split_per_user(data, SplitOptions(seed=8))
    assert a.select("user", "item").equals(data.select("user", "item"))
    assert a["split"].equals(b["split"])
    assert not a["split"].equals(c["split"])


@pytest.mark.parametrize("bad", [(0.8, 0.1), (0.5, 0.5, 0.5), (0.0, 0.5, 0.5), (1.1, -0.1, 0.0), ("a", 1, 2)])
def test_bad_ratios_are_refused(bad: tuple) -> None:
    with pytest.raises(KGDataError, match="split ratios need"):
        check_ratios(bad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "chronological"}, "split method 'chronological' is unknown"),
        ({"method": "0.8,0.1,0.1"}, "give the shares as split ratios"),
        ({"rounding": "nearest"}, "split rounding 'nearest' is unknown"),
        ({"seed": 1.5}, "split seed needs to be an integer"),
    ],
)
def test_bad_split_options_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(KGDataError, match=message):
        SplitOptions(**kwargs)


def test_ratios_accept_any_sequence() -> None:
    assert check_ratios([0.7, 0.2, 0.1]) == (0.7, 0.2, 0.1)
    assert SplitOptions(ratios=[0.7, 0.2, 0.1]).ratios == (0.7, 0.2, 0.1)
