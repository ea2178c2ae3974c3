"""ingest's split options end to end: --split random|time, --split-ratios, --split-rounding and
--drop-unlinked-items change the written tables as documented (RecBole-comparable splits)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kg_data import KGDataset, ingest

#: Users with 2, 3 and 15 interactions: sizes where half-up and RecBole's rounding disagree.
DEGREES = {"a": 2, "b": 3, "c": 15}


def plain_raw(root: Path, *, split_column: bool = False) -> Path:
    """Plain TSV tables: user u's k-th interaction is item `u{k}` at time 100 - k (newest first in
    the file), items with an even k are linked to the KG. With `split_column`, every row says train
    except each user's first row (test)."""
    root.mkdir(parents=True)
    header = "user\titem\ttimestamp" + ("\tsplit" if split_column else "")
    rows = [
        f"{user}\t{user}{k}\t{100 - k}"
        + (("\ttest" if k == 0 else "\ttrain") if split_column else "")
        for user, n in DEGREES.items()
        for k in range(n)
    ]
    (root / "interactions.tsv").write_text("\n".join([header, *rows]) + "\n")
    linked = [f"{user}{k}\tgenre\tg{k % 3}" for user, n in DEGREES.items() for k in range(0, n, 2)]
    (root / "triples.tsv").write_text("\n".join(["head\trelation\ttail", *linked]) + "\n")
    return root


def counts(out: Path) -> dict[str, int]:
    return KGDataset.open(out).metadata["n_interactions"]


@pytest.mark.parametrize(
    ("rounding", "expected"),
    [
        (
            "half-up",
            {"train": 2 + 3 + 11, "valid": 0 + 0 + 2, "test": 0 + 0 + 2},
        ),  # a: 2/0/0, b: 3/0/0, c: 11/2/2
        (
            "down",
            {"train": 1 + 1 + 13, "valid": 0 + 1 + 1, "test": 1 + 1 + 1},
        ),  # a: 1/0/1, b: 1/1/1, c: 13/1/1 (RecBole)
    ],
)
def test_rounding_decides_the_split_sizes_of_small_users(
    tmp_path: Path, rounding: str, expected: dict[str, int]
) -> None:
    raw = plain_raw(tmp_path / "raw")
    info = ingest(raw, tmp_path / "out", split_rounding=rounding, progress=False)
    assert counts(info.path) == expected
    assert (
        info.metadata["split"]["rounding"] == rounding
        and info.metadata["split"]["method"] == "per_user_by_timestamp"
    )


def test_time_puts_each_users_newest_in_test_and_random_does_not(tmp_path: Path) -> None:
    raw = plain_raw(tmp_path / "raw")
    by_time = ingest(
        raw, tmp_path / "time", split="time", split_ratios=(0.6, 0.2, 0.2), progress=False
    )
    by_random = ingest(
        raw,
        tmp_path / "random",
        split="random",
        split_ratios=(0.6, 0.2, 0.2),
        seed=3,
        progress=False,
    )
    # Half-up shares 0.6/0.2/0.2 of 2, 3, 15: a 2/0/0, b 1/1/1, c 9/3/3; the same for both orders.
    assert counts(by_time.path) == counts(by_random.path) == {"train": 12, "valid": 4, "test": 4}
    newest = {("b", "b0"), ("c", "c0"), ("c", "c1"), ("c", "c2")}  # timestamps fall with k
    assert pairs_in_test(by_time.path) == newest
    assert pairs_in_test(by_random.path) != newest and len(pairs_in_test(by_random.path)) == 4
    assert by_random.metadata["split"]["seed"] == 3 and by_time.metadata["split"]["seed"] is None


def test_given_split_column_is_kept_unless_a_method_is_asked_for(tmp_path: Path) -> None:
    raw = plain_raw(tmp_path / "raw", split_column=True)
    given = ingest(raw, tmp_path / "given", progress=False)
    assert (
        counts(given.path) == {"train": 17, "valid": 0, "test": 3}
        and given.metadata["split"]["method"] == "given"
    )
    resplit = ingest(raw, tmp_path / "time", split="time", split_rounding="down", progress=False)
    assert counts(resplit.path) == {"train": 15, "valid": 2, "test": 3}
    assert resplit.metadata["split"]["requested"] == "time"


def test_dropping_items_without_kg_links_counts_them_and_splits_what_is_left(
    tmp_path: Path,
) -> None:
    raw = plain_raw(tmp_path / "raw")
    kept_all = ingest(raw, tmp_path / "all", progress=False)
    dropped = ingest(
        raw, tmp_path / "linked", drop_unlinked_items=True, split_rounding="down", progress=False
    )
    # Linked (even k): a 1 of 2, b 2 of 3, c 8 of 15 -> 9 of 20 interactions dropped.
    assert dropped.metadata["dropped"]["interactions_with_items_without_triples"] == 9
    assert kept_all.metadata["dropped"]["interactions_with_items_without_triples"] == 0
    assert kept_all.metadata["reported"]["interactions_with_items_without_triples"] == 9
    # Split after dropping, RecBole's rounding: a 1/0/0, b 1/0/1, c 6/1/1.
    assert counts(dropped.path) == {"train": 8, "valid": 1, "test": 2}
    kept_items = set(pl.read_parquet(dropped.path / "interactions.parquet")["item"].to_list())
    assert len(kept_items) == 11
    assert (
        dropped.metadata["n_items"] == kept_all.metadata["n_items"] == 20
    )  # dropped items keep their ids


def pairs_in_test(out: Path) -> set[tuple[str, str]]:
    """(user name, item name) of the test split."""
    inter = pl.read_parquet(out / "interactions.parquet").filter(pl.col("split") == "test")
    users = dict(pl.read_parquet(out / "users.parquet").iter_rows())
    items = dict(pl.read_parquet(out / "items.parquet").iter_rows())
    return {(users[u], items[i]) for u, i in inter.select("user", "item").iter_rows()}
