"""Full-ranking evaluation against hand-computed values and a slow pure-Python reference."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from kg_data import KGDataset, ingest
from tests.widened import widened_items
from tinykg_train.evaluate import (
    BLOCK_BYTES_PER_SCORE,
    MIN_BLOCK_USERS,
    RankingEvaluator,
    UserItems,
    block_sizes,
)
from tinykg_train.memory import allocation_peak


class FixedScorer(torch.nn.Module):
    """A Recommender whose scores are a given [n_users, n_items] matrix."""

    def __init__(self, scores: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("scores", scores)
        self.prepared = 0

    def prepare_scoring(self) -> None:
        self.prepared += 1

    def score_users(self, users: torch.Tensor) -> torch.Tensor:
        return self.scores[users]


def reference_evaluate(
    dataset: KGDataset, scores: np.ndarray, split: str, ks, users=None
) -> dict[str, float]:
    """Per user (every one, or those in `users`), straight from the definitions: sort every unmasked
    item, count and discount hits."""
    masked_splits = ["train"] if split == "valid" else ["train", "valid"]
    known: dict[int, set[int]] = {}
    for name in masked_splits:
        for user, item in dataset.pairs(name).tolist():
            known.setdefault(user, set()).add(item)
    held_out: dict[int, set[int]] = {}
    for user, item in dataset.pairs(split).tolist():
        held_out.setdefault(user, set()).add(item)
    sums = {f"{m}@{k}": 0.0 for k in ks for m in ("recall", "ndcg")}
    counted = 0
    for user in sorted(held_out):
        if users is not None and user not in users:
            continue
        relevant = held_out[user] - known.get(user, set())
        if not relevant:
            continue
        candidates = [i for i in range(scores.shape[1]) if i not in known.get(user, set())]
        ranking = sorted(candidates, key=lambda i: -scores[user, i])
        for k in ks:
            top = ranking[:k]
            dcg = sum(1 / math.log2(p + 2) for p, item in enumerate(top) if item in relevant)
            ideal = sum(1 / math.log2(p + 2) for p in range(min(len(relevant), k)))
            sums[f"recall@{k}"] += sum(item in relevant for item in top) / len(relevant)
            sums[f"ndcg@{k}"] += dcg / ideal
        counted += 1
    return {name: total / counted for name, total in sums.items()}


@pytest.fixture(scope="module")
def hand_dataset(tmp_path_factory) -> KGDataset:
    """4 users, 8 items. User 2 has no valid item, user 3 no test item."""
    raw = tmp_path_factory.mktemp("hand_raw")
    (raw / "train.txt").write_text("0 0 1 2\n1 3 4\n2 5\n3 0 6\n")
    (raw / "valid.txt").write_text("0 3\n1 5\n3 1\n")
    (raw / "test.txt").write_text("0 4\n1 6\n2 7\n")
    (raw / "kg_final.txt").write_text("0 0 8\n1 0 9\n7 1 8\n")
    out = tmp_path_factory.mktemp("hand_ds") / "ds"
    return KGDataset.open(ingest(raw, out, progress=False).path)


def hand_scores() -> torch.Tensor:
    descending = torch.arange(8, 0, -1, dtype=torch.float32)  # item 0 first
    ascending = torch.arange(8, dtype=torch.float32)  # item 7 first
    return torch.stack([descending, ascending, descending, descending])


def test_hand_made_valid_ranking_masks_train_items(hand_dataset):
    evaluator = RankingEvaluator(hand_dataset, ks=[1, 3])
    model = FixedScorer(hand_scores())
    got = evaluator.evaluate(model, "valid")
    # user 0: train {0,1,2} masked -> ranking 3,4,.. and valid item 3 is first
    # user 1: train {3,4} masked -> ranking 7,6,5,.. and valid item 5 is third
    # user 2: no valid item (skipped); user 3: train {0,6} masked -> valid item 1 first
    assert got["recall@1"] == pytest.approx(2 / 3)
    assert got["recall@3"] == pytest.approx(1.0)
    assert got["ndcg@1"] == pytest.approx(2 / 3)
    assert got["ndcg@3"] == pytest.approx((1 + 1 / math.log2(4) + 1) / 3)
    assert model.prepared == 1


class HeldScorer(FixedScorer):
    """Returns scores it keeps: the whole matrix itself (`view=False`) or a view of it."""

    def __init__(self, scores: torch.Tensor, view: bool) -> None:
        super().__init__(scores)
        self.view = view

    def score_users(self, users: torch.Tensor) -> torch.Tensor:
        assert users.tolist() == list(range(int(users[0]), int(users[-1]) + 1))
        whole = self.scores
        return whole[int(users[0]) : int(users[-1]) + 1] if self.view else whole


@pytest.mark.parametrize("view", [False, True])
def test_scores_a_model_still_holds_are_not_masked_in_place(hand_dataset, view):
    """The evaluator masks fresh score blocks in place but must copy what the model keeps."""
    evaluator = RankingEvaluator(hand_dataset, ks=[1, 3])
    scores = hand_scores()
    model = HeldScorer(scores.clone(), view)
    evaluator.users = lambda split: np.arange(4)  # contiguous users: one block, one view
    first = evaluator.evaluate(model, "valid")
    assert torch.equal(model.scores, scores)  # no -inf written into the model's own scores
    assert evaluator.evaluate(model, "valid") == first
    assert first == evaluator.evaluate(FixedScorer(scores), "valid")


def test_hand_made_test_ranking_masks_train_and_valid_items(hand_dataset):
    evaluator = RankingEvaluator(hand_dataset, ks=[1, 20])  # K above n_items = 8
    got = evaluator.evaluate(FixedScorer(hand_scores()), "test")
    # user 0: {0,1,2,3} masked -> test item 4 first; user 1: {3,4,5} masked -> 7,6: item 6 second
    # user 2: {5} masked -> 0,1,2,3,4,6,7: test item 7 seventh; user 3: no test item (skipped)
    assert got["recall@1"] == pytest.approx(1 / 3)
    assert got["recall@20"] == pytest.approx(1.0)
    assert got["ndcg@20"] == pytest.approx((1 + 1 / math.log2(3) + 1 / math.log2(8)) / 3)


def test_users_without_held_out_items_are_skipped(hand_dataset):
    evaluator = RankingEvaluator(hand_dataset)
    assert evaluator.users("valid").tolist() == [0, 1, 3]
    assert evaluator.users("test").tolist() == [0, 1, 2]


@pytest.mark.parametrize("split", ["valid", "test"])
@pytest.mark.parametrize("batch_users", [7, 1000])
def test_random_scores_agree_with_the_reference(tiny_dataset_dir: Path, split, batch_users):
    dataset = KGDataset.open(tiny_dataset_dir)
    generator = torch.Generator().manual_seed(3)
    scores = torch.rand(dataset.n_users, dataset.n_items, generator=generator)  # no ties
    ks = [1, 5, 20, 50]
    got = RankingEvaluator(dataset, ks, batch_users=batch_users).evaluate(
        FixedScorer(scores), split
    )
    expected = reference_evaluate(dataset, scores.double().numpy(), split, ks)
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-9), name


@pytest.mark.parametrize("split", ["valid", "test"])
def test_a_user_sample_ranks_that_many_seeded_users_against_every_item(
    tiny_dataset_dir: Path, split
):
    dataset = KGDataset.open(tiny_dataset_dir)
    everyone = RankingEvaluator(dataset).users(split)
    sampled = RankingEvaluator(dataset, sample_users=50, seed=1)
    users = sampled.users(split)
    assert len(users) == len(set(users.tolist())) == 50 and set(users) <= set(everyone)
    assert np.all(np.diff(users) > 0)  # sorted
    assert np.array_equal(users, RankingEvaluator(dataset, sample_users=50, seed=1).users(split))
    assert not np.array_equal(users, RankingEvaluator(dataset, sample_users=50, seed=2).users(split))
    big = RankingEvaluator(dataset, sample_users=len(everyone) + 1)  # more than there are: all
    assert np.array_equal(big.users(split), everyone)

    scores = torch.rand(dataset.n_users, dataset.n_items, generator=torch.Generator().manual_seed(4))
    got = sampled.evaluate(FixedScorer(scores), split)
    expected = reference_evaluate(dataset, scores.double().numpy(), split, [20], set(users.tolist()))
    assert got == pytest.approx(expected, rel=1e-9)
    assert got != pytest.approx(reference_evaluate(dataset, scores.double().numpy(), split, [20]))


def test_scoring_the_known_items_high_does_not_help(tiny_dataset_dir: Path):
    """A model that puts every training item on top gains nothing: those items are masked."""
    dataset = KGDataset.open(tiny_dataset_dir)
    scores = torch.rand(
        dataset.n_users, dataset.n_items, generator=torch.Generator().manual_seed(1)
    )
    boosted = scores.clone()
    users, items = torch.from_numpy(dataset.pairs("train")).T
    boosted[users, items] += 10.0
    evaluator = RankingEvaluator(dataset, [20])
    assert evaluator.evaluate(FixedScorer(boosted), "valid") == evaluator.evaluate(
        FixedScorer(scores), "valid"
    )


def test_evaluation_restores_the_training_mode_and_checks_shapes(hand_dataset):
    evaluator = RankingEvaluator(hand_dataset, [20])
    model = FixedScorer(hand_scores())
    model.train()
    evaluator.evaluate(model, "valid")
    assert model.training
    with pytest.raises(ValueError, match="score_users returned shape"):
        evaluator.evaluate(FixedScorer(hand_scores()[:, :5]), "valid")
    with pytest.raises(ValueError, match="'split' needs to be one of valid, test"):
        evaluator.evaluate(model, "train")


def test_user_items_gather():
    pairs = np.array([[2, 5], [0, 1], [2, 7], [0, 3]])
    table = UserItems.from_pairs(pairs, n_users=4)
    assert table.counts().tolist() == [2, 0, 2, 0]
    rows, items = table.gather(np.array([2, 1, 0]))
    assert list(zip(rows.tolist(), items.tolist(), strict=True)) == [(0, 5), (0, 7), (2, 1), (2, 3)]


def test_user_items_are_held_in_int32_and_gather_what_int64_arrays_gather(tiny_dataset_dir):
    dataset = KGDataset.open(tiny_dataset_dir)
    table = UserItems.from_pairs(dataset.pairs("train"), dataset.n_users)
    assert table.indptr.dtype == table.items.dtype == np.int32
    wide = widened_items({"train": table})["train"]
    users = np.random.default_rng(0).permutation(dataset.n_users)
    for got, expected in zip(table.gather(users), wide.gather(users), strict=True):
        assert got.dtype == np.int64 and np.array_equal(got, expected)
    assert table.counts().dtype == np.int64 and np.array_equal(table.counts(), wide.counts())


def test_user_items_beyond_int32_stay_int64():
    table = UserItems.from_pairs(np.array([[1, 2**31], [0, 3], [1, 4]]), n_users=2)
    assert table.items.dtype == np.int64 and table.indptr.dtype == np.int32
    rows, items = table.gather(np.array([1, 0]))
    assert rows.tolist() == [0, 0, 1] and items.tolist() == [2**31, 4, 3]


def test_the_evaluator_holds_int32_items_and_ranks_as_with_int64_ones(tiny_dataset_dir):
    dataset = KGDataset.open(tiny_dataset_dir)
    evaluator = RankingEvaluator(dataset, [1, 20], batch_users=64)
    assert {table.items.dtype for table in evaluator.split_items.values()} == {np.dtype(np.int32)}
    wide = RankingEvaluator(dataset, [1, 20], batch_users=64)
    wide.split_items = widened_items(evaluator.split_items)
    model = ProductScorer(dataset.n_users, dataset.n_items, 16)
    for split in ("valid", "test"):
        assert evaluator.evaluate(model, split) == wide.evaluate(model, split)


class ProductScorer(torch.nn.Module):
    """Scores as a matrix product of user and item vectors (what the embedding models compute)."""

    def __init__(self, n_users: int, n_items: int, dim: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(5)
        self.user_vectors = torch.randn(n_users, dim, generator=generator)
        self.item_vectors = torch.randn(n_items, dim, generator=generator)

    def prepare_scoring(self) -> None:
        pass

    def score_users(self, users: torch.Tensor) -> torch.Tensor:
        return self.user_vectors[users] @ self.item_vectors.T


@pytest.fixture(scope="module")
def many_users(tmp_path_factory) -> KGDataset:
    """700 users (chunks of several blocks), 300 items."""
    from kg_data.synthetic import write_synthetic_kgat

    raw = write_synthetic_kgat(
        tmp_path_factory.mktemp("many_raw"), n_users=700, n_items=300, n_extra_entities=50,
        n_relations=3, mean_user_degree=8, seed=1,
    )  # fmt: skip
    return KGDataset.open(ingest(raw, tmp_path_factory.mktemp("many") / "ds", progress=False).path)


def test_block_sizes_split_evenly_within_the_budget_but_not_below_the_floor():
    per_user = 300 * BLOCK_BYTES_PER_SCORE
    assert block_sizes(700, 300, 10**9) == [700]
    sizes = block_sizes(700, 300, 200 * per_user)
    assert sum(sizes) == 700 and max(sizes) <= 200 and max(sizes) - min(sizes) <= 1
    floor = block_sizes(700, 300, 1)  # a budget below one user: blocks at the floor
    assert sum(floor) == 700 and min(floor) >= MIN_BLOCK_USERS and len(floor) == 5
    assert block_sizes(MIN_BLOCK_USERS + 5, 300, 1) == [MIN_BLOCK_USERS + 5]


@pytest.mark.parametrize("dim", [16, 64, 176])
def test_product_rows_do_not_depend_on_how_many_rows_a_block_has(dim):
    """What makes the metrics the same for every block budget: from MIN_BLOCK_USERS rows up, each row
    of a matrix product is the same bits however many rows are multiplied at once."""
    generator = torch.Generator().manual_seed(dim)
    users, items = torch.randn(1024, dim, generator=generator), torch.randn(3000, dim, generator=generator)
    whole = users @ items.T
    for rows in (MIN_BLOCK_USERS, 200, 513):
        for start in (0, 300, 1024 - rows):
            assert torch.equal(users[start : start + rows] @ items.T, whole[start : start + rows])


@pytest.mark.parametrize("split", ["valid", "test"])
def test_metrics_are_the_same_bits_for_every_block_budget(many_users, split):
    model = ProductScorer(many_users.n_users, many_users.n_items, 64)
    results = [
        RankingEvaluator(many_users, [1, 20, 50], batch_users=batch, block_bytes=budget).evaluate(
            model, split
        )
        for batch, budget in ((1024, 10**9), (1024, 1), (500, 140 * 300 * BLOCK_BYTES_PER_SCORE))
    ]
    assert results[0] == results[1] == results[2]


def test_a_block_budget_bounds_the_score_blocks_memory(many_users):
    model = ProductScorer(many_users.n_users, many_users.n_items, 64)
    peaks = {}
    for budget in (10**9, MIN_BLOCK_USERS * 300 * BLOCK_BYTES_PER_SCORE):
        windows = {}

        @contextlib.contextmanager
        def stage(name, windows=windows):
            with allocation_peak(torch.device("cpu")) as window:
                yield
            windows[name] = window

        RankingEvaluator(many_users, [20], block_bytes=budget).evaluate(model, "valid", stage=stage)
        peaks[budget] = windows["scoring"].peak_bytes
    whole, bounded = peaks.values()
    n_users = len(RankingEvaluator(many_users).users("valid"))
    largest_block = max(block_sizes(n_users, 300, MIN_BLOCK_USERS * 300 * BLOCK_BYTES_PER_SCORE))
    assert largest_block < n_users
    assert whole >= n_users * 300 * BLOCK_BYTES_PER_SCORE
    # a block's work and its users' [block, 64] vectors (ProductScorer's gather)
    assert bounded <= 1.1 * largest_block * (300 * BLOCK_BYTES_PER_SCORE + 64 * 4)


def test_eval_users_reaches_the_runs_evaluator_and_a_bad_value_is_one_line(
    tiny_dataset_dir: Path, tmp_path: Path
):
    from tinykg_train.config import TrainConfig
    from tinykg_train.errors import ConfigError
    from tinykg_train.session import open_session

    config = TrainConfig(
        data=str(tiny_dataset_dir), model="bprmf", eval_users="30", seed=5, device="cpu",
        out=str(tmp_path / "run"),
    )  # fmt: skip
    session = open_session(config, torch.device("cpu"))
    assert len(session.evaluator.users("valid")) == 30 and session.evaluator.seed == 5
    with pytest.raises(ConfigError, match=r"^'eval_users' needs to be a positive integer or null \(got 0\)$"):  # fmt: skip
        TrainConfig(data="d", eval_users=0)
