"""Synthetic KGAT data: deterministic by seed, power-law degrees, and a KG that carries taste signal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kg_data.errors import KGDataError
from kg_data.formats.kgat import read_kgat
from kg_data.synthetic import write_synthetic_kgat

SIZES = {"n_users": 2000, "n_items": 1500, "n_extra_entities": 3000, "n_relations": 5, "mean_user_degree": 20}


@pytest.fixture(scope="module")
def medium(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_kgat(tmp_path_factory.mktemp("syn"), **SIZES, seed=11)


def file_bytes(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def test_same_seed_same_files_other_seed_other_files(tmp_path: Path) -> None:
    small = {"n_users": 50, "n_items": 80, "n_extra_entities": 100, "n_relations": 4, "mean_user_degree": 6}
    a = file_bytes(write_synthetic_kgat(tmp_path / "a", **small, seed=3))
    b = file_bytes(write_synthetic_kgat(tmp_path / "b", **small, seed=3))
    c = file_bytes(write_synthetic_kgat(tmp_path / "c", **small, seed=4))
    assert a == b
    assert a["train.txt"] != c["train.txt"] and a["kg_final.txt"] != c["kg_final.txt"]
    assert set(a) == {"train.txt", "valid.txt", "test.txt", "kg_final.txt", "user_list.txt", "item_list.txt", "entity_list.txt", "relation_list.txt"}


def test_sizes_and_id_ranges(medium: Path) -> None:
    data = read_kgat(medium)
    interactions, triples = data.interactions.collect(), data.triples.collect()
    assert (data.n_users, data.n_items, data.n_entities, data.n_relations) == (2000, 1500, 4500, 5)
    assert interactions["item"].max() < 1500
    heads, tails = triples["head"].to_numpy(), triples["tail"].to_numpy()
    assert max(heads.max(), tails.max()) < 4500
    assert triples.unique().height == triples.height  # written without duplicates
    mean_degree = interactions.height / 2000
    assert 0.9 * SIZES["mean_user_degree"] < mean_degree <= SIZES["mean_user_degree"]


def test_degrees_are_heavy_tailed(medium: Path) -> None:
    pairs = read_kgat(medium).interactions.collect()
    user_degree = np.bincount(pairs["user"].to_numpy())
    item_degree = np.bincount(pairs["item"].to_numpy(), minlength=1500)
    assert user_degree.max() > 8 * np.median(user_degree)
    assert item_degree.max() > 8 * np.median(item_degree)
    top = np.sort(item_degree)[::-1]
    assert top[: len(top) // 10].sum() > 0.3 * top.sum()  # the top 10% of items hold a third of the interactions


def shares_tail(items_a: np.ndarray, items_b: np.ndarray, tails: list[set[int]]) -> float:
    return float(np.mean([bool(tails[a] & tails[b]) for a, b in zip(items_a, items_b, strict=True)]))


def test_kg_tails_follow_user_tastes(medium: Path) -> None:
    data = read_kgat(medium)
    interactions, triples = data.interactions.collect(), data.triples.collect()
    triples = triples.filter(triples["head"] < 1500)  # item -> tail facts
    tails: list[set[int]] = [set() for _ in range(1500)]
    for head, tail in triples.select("head", "tail").iter_rows():
        tails[head].add(tail)
    rng = np.random.default_rng(0)
    by_user = interactions.group_by("user").agg("item").sort("user")
    same_a, same_b = [], []
    for items in by_user["item"].to_list():
        if len(items) >= 2:
            a, b = rng.choice(items, size=2, replace=False)
            same_a.append(a)
            same_b.append(b)
    random_a, random_b = rng.integers(0, 1500, (2, 5000))
    keep = random_a != random_b
    same = shares_tail(np.array(same_a), np.array(same_b), tails)
    baseline = shares_tail(random_a[keep], random_b[keep], tails)
    assert same > 3 * baseline, (same, baseline)  # measured: about 0.55 against 0.07


def test_every_user_keeps_a_training_item_and_some_stand_alone_in_test(medium: Path) -> None:
    data = read_kgat(medium)
    interactions = data.interactions.collect()
    train_users = interactions.filter(interactions["split"] == 0)["user"].unique()  # split code 0: train
    assert train_users.len() == 2000
    assert data.reported["user_lines_without_items"] > 0  # users with few items have none in valid/test


@pytest.mark.parametrize(
    ("change", "message"),
    [({"n_users": 0}, "'n_users' needs to be at least 1"), ({"mean_user_degree": 1000}, "at most n_items / 2")],
)
def test_bad_sizes_are_refused(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(KGDataError, match=message):
        write_synthetic_kgat(tmp_path, **{**SIZES, **change}, seed=0)
