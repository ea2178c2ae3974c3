"""`trainer.train` end to end on the tiny synthetic dataset, with a small model of our own.

The model is a real (if simple) recommender: BPR matrix factorization with dropout on the user
vectors, and optionally a TransE phase over the KG, so the trainer's CF and KG phases, RNG handling
and compression hooks all run for real.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kg_data import KGDataset
from kg_data.errors import KGDataError
from tinykg_train.checkpoint import load_checkpoint
from tinykg_train.config import TrainConfig
from tinykg_train.errors import ConfigError, TinyKGError
from tinykg_train.evaluate import RankingEvaluator
from tinykg_train.most_popular import most_popular_metrics
from tinykg_train.trainer import train


class TinyMF(nn.Module):
    """BPR-MF (items are entities 0..n_items-1) with an optional TransE KG phase."""

    def __init__(self, dataset, config: TrainConfig, kg_phase: bool = False) -> None:
        super().__init__()
        dim = config.embed_dim
        self.has_kg_phase = kg_phase
        self.n_items, self.l2, self.dropout = dataset.n_items, config.l2, config.dropout
        self.users = nn.Parameter(0.1 * torch.randn(dataset.n_users, dim))
        self.entities = nn.Parameter(0.1 * torch.randn(dataset.n_entities, dim))
        self.relations = nn.Parameter(0.1 * torch.randn(max(dataset.n_relations, 1), dim))
        self.epochs_started: list[int] = []

    def on_epoch_start(self, epoch: int) -> None:
        self.epochs_started.append(epoch)

    def loss(self, users, pos_items, neg_items) -> torch.Tensor:
        u = F.dropout(self.users[users], self.dropout, self.training)
        pos, neg = self.entities[pos_items], self.entities[neg_items]
        bpr = -F.logsigmoid((u * pos).sum(-1) - (u * neg).sum(-1)).mean()
        return bpr + self.l2 * (u.square().sum() + pos.square().sum() + neg.square().sum()) / len(
            users
        )

    def kg_loss(self, heads, relations, tails, neg_tails) -> torch.Tensor:
        translated = self.entities[heads] + self.relations[relations]
        pos = (translated - self.entities[tails]).square().sum(-1)
        neg = (translated - self.entities[neg_tails]).square().sum(-1)
        return -F.logsigmoid(neg - pos).mean()

    def prepare_scoring(self) -> None:
        pass

    def score_users(self, users: torch.Tensor) -> torch.Tensor:
        return self.users[users] @ self.entities[: self.n_items].T


def mf_builder(name, dataset, config):
    return TinyMF(dataset, config, kg_phase=config.extra.get("kg_phase", False))


class Diverging(TinyMF):
    def loss(self, users, pos_items, neg_items) -> torch.Tensor:
        return super().loss(users, pos_items, neg_items) * float("nan")


def tiny_config(data: Path, out: Path, **overrides) -> TrainConfig:
    settings = dict(
        data=str(data), out=str(out), model="bprmf", epochs=2, seed=0, lr=0.05, embed_dim=16,
        batch_size=128, kg_batch_size=256, max_batches_per_epoch=4, dropout=0.2, device="cpu",
    )  # fmt: skip
    return TrainConfig(**{**settings, **overrides})


COMPARED = ("recall@20", "ndcg@20", "train_loss", "valid_history", "best_epoch", "activation_bytes")


def comparable(result: dict) -> dict:
    return {key: result[key] for key in COMPARED if key in result} | {
        "kg_loss": result.get("kg_loss")
    }


def test_metrics_json_holds_the_contract_keys(tiny_dataset_dir, tmp_path):
    result = train(tiny_config(tiny_dataset_dir, tmp_path / "run"), model_builder=mf_builder)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics == json.loads(json.dumps(result))
    for key in ("recall@20", "ndcg@20"):
        assert isinstance(metrics[key], float) and 0 <= metrics[key] <= 1
    assert isinstance(metrics["activation_bytes"], int) and metrics["activation_bytes"] > 0
    assert len(metrics["epoch_seconds"]) == 2 and all(s > 0 for s in metrics["epoch_seconds"])
    assert (metrics["bits"], metrics["model"], metrics["seed"]) == (32, "bprmf", 0)
    assert metrics["epochs_trained"] == 2 and len(metrics["valid_history"]) == 2
    assert metrics["peak_rss_bytes"] > 0 and metrics["cuda_max_memory_allocated"] is None
    assert "kg_loss" not in metrics
    files = {p.name for p in (tmp_path / "run").iterdir()}
    assert files == {
        "checkpoint.pt", "config.yaml", "metrics.json", "activation_memory.csv",
        "activation_memory.png", f"best_model_epoch{metrics['best_epoch']}.pt",
    }  # fmt: skip
    table = (tmp_path / "run" / "activation_memory.csv").read_text().splitlines()
    assert table[0] == "module,bytes,share" and table[-1].startswith("total,")
    assert int(table[-1].split(",")[1]) == sum(metrics["activation_bytes_by_module"].values())


def test_the_run_sets_its_torch_threads_and_records_them(tiny_dataset_dir, tmp_path, monkeypatch):
    import tinykg_train.threads as threads

    before = torch.get_num_threads()
    try:
        given = train(
            tiny_config(tiny_dataset_dir, tmp_path / "given", epochs=1, threads=2),
            model_builder=mf_builder,
        )
        assert given["torch_threads"] == 2 == torch.get_num_threads()
        monkeypatch.setattr(threads, "available_cpus", lambda: 1)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        auto = train(
            tiny_config(tiny_dataset_dir, tmp_path / "auto", epochs=1), model_builder=mf_builder
        )
        assert auto["torch_threads"] == 1 == torch.get_num_threads()
        saved = json.loads((tmp_path / "auto" / "metrics.json").read_text())
        assert saved["torch_threads"] == 1 and saved["config"]["threads"] is None
    finally:
        torch.set_num_threads(before)


def test_same_seed_gives_identical_metrics_and_another_seed_differs(tiny_dataset_dir, tmp_path):
    runs = [
        train(
            tiny_config(tiny_dataset_dir, tmp_path / name, bits=2, seed=seed),
            model_builder=mf_builder,
        )
        for name, seed in (("a", 3), ("b", 3), ("c", 4))
    ]
    assert comparable(runs[0]) == comparable(runs[1])
    assert runs[0]["train_loss"] != runs[2]["train_loss"]


def test_int2_holds_fewer_activation_bytes_than_fp32(tiny_dataset_dir, tmp_path):
    fp32, int2 = (
        train(
            tiny_config(tiny_dataset_dir, tmp_path / str(bits), bits=bits, epochs=1),
            model_builder=mf_builder,
        )
        for bits in (32, 2)
    )
    assert int2["activation_bytes"] * 4 < fp32["activation_bytes"]


def test_kg_phase_runs_and_resume_continues_exactly(tiny_dataset_dir, tmp_path):
    config = tiny_config(tiny_dataset_dir, tmp_path / "full", epochs=3, extra={"kg_phase": True})
    full = train(config, model_builder=mf_builder)
    assert len(full["kg_loss"]) == 3 and all(loss > 0 for loss in full["kg_loss"])

    first = config.with_overrides(out=str(tmp_path / "split"), epochs=1)
    train(first, model_builder=mf_builder)
    resumed = train(first.with_overrides(epochs=3, resume=True), model_builder=mf_builder)
    assert resumed["resumed_at_epoch"] == 1
    assert comparable(resumed) == comparable(full)


def test_training_learns_more_than_a_random_ranker(tiny_dataset_dir, tmp_path):
    result = train(
        tiny_config(tiny_dataset_dir, tmp_path / "run", epochs=8, max_batches_per_epoch=None),
        model_builder=mf_builder,
    )
    assert result["train_loss"][-1] < 0.8 * result["train_loss"][0]
    dataset = KGDataset.open(tiny_dataset_dir)
    torch.manual_seed(0)
    random_model = TinyMF(dataset, tiny_config(tiny_dataset_dir, tmp_path))
    chance = RankingEvaluator(dataset, [20]).evaluate(random_model, "test")["recall@20"]
    assert result["recall@20"] > 2 * chance


def test_the_test_metrics_come_with_the_most_popular_ranking_of_the_same_users(
    tiny_dataset_dir, tmp_path
):
    config = tiny_config(tiny_dataset_dir, tmp_path / "run", epochs=1, eval_users=7, seed=3)
    result = train(config, model_builder=mf_builder)
    expected = most_popular_metrics(tiny_dataset_dir, ks=(20,), sample_users=7, seed=3)
    assert result["most_popular"] == expected and expected["recall@20"] > 0
    other_users = most_popular_metrics(tiny_dataset_dir, ks=(20,), sample_users=7, seed=4)
    assert other_users != expected  # so the equality above says the users were the run's
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["most_popular"] == result["most_popular"]


def test_on_epoch_reports_carry_valid_metrics_and_early_stopping(tiny_dataset_dir, tmp_path):
    reports = []
    # lr so small the ranking never changes: the first evaluation stays the best
    config = tiny_config(tiny_dataset_dir, tmp_path / "run", epochs=10, lr=1e-12, patience=2)
    result = train(config, on_epoch=reports.append, model_builder=mf_builder)
    assert [r["epoch"] for r in reports] == [0, 1, 2]
    assert result["stopped_early"] and result["epochs_trained"] == 3 and result["best_epoch"] == 0
    assert all("recall@20" in r and "train_loss" in r for r in reports)
    assert [r["stopped_early"] for r in reports] == [False, False, True]


def test_min_epochs_keeps_training_through_an_early_plateau(tiny_dataset_dir, tmp_path):
    config = tiny_config(
        tiny_dataset_dir, tmp_path / "run", epochs=10, lr=1e-12, patience=2, min_epochs=6
    )
    result = train(config, model_builder=mf_builder)
    assert result["stopped_early"] and result["epochs_trained"] == 6 and result["best_epoch"] == 0


def test_evaluation_every_other_epoch_carries_the_last_metrics(tiny_dataset_dir, tmp_path):
    reports = []
    config = tiny_config(tiny_dataset_dir, tmp_path / "run", epochs=3, eval_every=2, eval_ks=(5,))
    result = train(config, on_epoch=reports.append, model_builder=mf_builder)
    assert [row["epoch"] for row in result["valid_history"]] == [1, 2]  # and the last epoch
    assert "recall@5" in result and "recall@20" in result
    assert "recall@20" not in reports[0] and reports[2]["recall@20"] is not None


def test_bad_inputs_raise_before_anything_is_written(tiny_dataset_dir, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KGDataError, match="no such dataset dir"):
        train(tiny_config(tmp_path / "missing", out), model_builder=mf_builder)
    with pytest.raises(KGDataError, match="not a dataset dir"):
        train(tiny_config(tmp_path, out), model_builder=mf_builder)
    with pytest.raises(ConfigError, match="no dataset given"):
        train(tiny_config("", out), model_builder=mf_builder)
    assert not out.exists()

    config = tiny_config(tiny_dataset_dir, out, epochs=1)
    train(config, model_builder=mf_builder)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    with pytest.raises(ConfigError, match="already holds a checkpoint.*pass --resume"):
        train(config, model_builder=mf_builder)
    with pytest.raises(
        ConfigError, match=r"cannot resume with changed settings \(lr: 0.05 -> 0.1\)"
    ):
        train(config.with_overrides(resume=True, lr=0.1), model_builder=mf_builder)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_a_checkpoint_older_than_a_setting_resumes_as_that_setting_s_default(
    tiny_dataset_dir, tmp_path
):
    """A checkpoint written before a setting existed (its config lacks the key) trained with what is
    now that setting's default, so it resumes; a real change is still refused."""
    from tinykg_train.checkpoint import save_checkpoint

    config = tiny_config(tiny_dataset_dir, tmp_path / "run", epochs=2)
    whole = train(config.with_overrides(out=str(tmp_path / "whole")), model_builder=mf_builder)
    train(config.with_overrides(epochs=1), model_builder=mf_builder)
    path = tmp_path / "run" / "checkpoint.pt"
    checkpoint = load_checkpoint(path)
    for newer in ("sampler", "fanouts", "workers", "threads"):
        del checkpoint["config"][newer]
    checkpoint["config"]["epochs"] = 2
    save_checkpoint(path, checkpoint)
    with pytest.raises(ConfigError, match=r"changed settings \(sampler: 'none' -> 'neighbor'"):
        train(config.with_overrides(resume=True, sampler="neighbor"), model_builder=mf_builder)
    resumed = train(config.with_overrides(resume=True), model_builder=mf_builder)
    assert resumed["resumed_at_epoch"] == 1 and resumed["train_loss"] == whole["train_loss"]


def test_a_diverging_run_fails_with_one_clear_line(tiny_dataset_dir, tmp_path):
    with pytest.raises(TinyKGError, match="cf loss became nan in epoch 0 .*lower --lr"):
        train(
            tiny_config(tiny_dataset_dir, tmp_path / "run"),
            model_builder=lambda name, dataset, config: Diverging(dataset, config),
        )
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_checkpoint_holds_rng_states_and_loads_weights_only(tiny_dataset_dir, tmp_path):
    train(tiny_config(tiny_dataset_dir, tmp_path / "run", epochs=1), model_builder=mf_builder)
    checkpoint = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert checkpoint["state"]["next_epoch"] == 1
    assert set(checkpoint["rng"]) == {"torch", "cuda", "numpy", "python"}
    assert checkpoint["config"]["lr"] == 0.05
    assert set(checkpoint["model"]) == {"users", "entities", "relations"}


@pytest.mark.cuda
def test_training_on_cuda_reports_the_allocator_peak_and_resumes(tiny_dataset_dir, tmp_path):
    config = tiny_config(tiny_dataset_dir, tmp_path / "run", device="cuda", bits=2, epochs=1)
    first = train(config, model_builder=mf_builder)
    assert first["device"].startswith("cuda") and first["cuda_max_memory_allocated"] > 0
    resumed = train(config.with_overrides(epochs=2, resume=True), model_builder=mf_builder)
    assert resumed["resumed_at_epoch"] == 1 and resumed["epochs_trained"] == 2
    assert resumed["train_loss"][0] == first["train_loss"][0]


def test_metrics_json_records_the_kernel_backends_that_ran_and_torch_threads(
    tiny_dataset_dir, tmp_path
):
    import tinykg_kernels
    from tinykg_kernels import backend_usage

    before = backend_usage()
    result = train(tiny_config(tiny_dataset_dir, tmp_path / "run", model="kgat", bits=2))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    # exactly this run's calls, per op and backend: the codec ran, and the CSR product
    assert metrics["kernels_backends"] == backend_usage(since=before) == result["kernels_backends"]
    assert sum(metrics["kernels_backends"]["quantize"].values()) > 0
    assert set(metrics["kernels_backends"]["csr_matmul"]) <= {"cpu-native", "torch"}
    assert set(metrics["kernels_backends"]["csr_transposed_add"]) <= {"cpu-native", "torch"}
    assert metrics["tinykg_kernels_version"] == tinykg_kernels.__version__
    assert metrics["torch_threads"] == torch.get_num_threads()
    assert metrics["kernels_native"] in ("loaded", "not loaded") or metrics[
        "kernels_native"
    ].startswith(("off", "unavailable"))
    assert metrics["kernels_backend_requested"] == "auto"


SAMPLED = dict(model="kgat", n_layers=2, sampler="neighbor", fanouts=(3, 3))


def test_sampled_training_reports_its_waits_and_resumes_exactly(tiny_dataset_dir, tmp_path):
    config = tiny_config(tiny_dataset_dir, tmp_path / "full", epochs=3, bits=2, **SAMPLED)
    full = train(config)  # the real KGAT: sampled CF steps, and its KG phase reads rows too
    assert len(full["sampler_wait_seconds"]) == 3 and min(full["sampler_wait_seconds"]) >= 0
    assert (full["config"]["sampler"], full["config"]["fanouts"]) == ("neighbor", [3, 3])
    assert len(full["kg_loss"]) == 3 and all(math.isfinite(x) for x in full["train_loss"])

    first = config.with_overrides(out=str(tmp_path / "split"), epochs=1)
    train(first)
    resumed = train(first.with_overrides(epochs=3, resume=True))
    assert resumed["resumed_at_epoch"] == 1
    assert comparable(resumed) == comparable(full)


def test_sampling_every_neighbor_trains_as_the_whole_graph_does(tiny_dataset_dir, tmp_path):
    """KGAT at 32 bits without dropout: the same losses, epoch by epoch, to float rounding."""
    settings = dict(epochs=2, dropout=0.0, model="kgat", n_layers=2)
    whole = train(tiny_config(tiny_dataset_dir, tmp_path / "whole", **settings))
    sampled = train(
        tiny_config(
            tiny_dataset_dir, tmp_path / "sampled", sampler="neighbor", fanouts=(-1, -1), **settings
        )
    )
    for key in ("train_loss", "kg_loss"):
        assert sampled[key] == pytest.approx(whole[key], rel=1e-5)
    assert "sampler_wait_seconds" not in whole


def test_a_model_that_cannot_sample_is_refused_before_anything_is_written(
    tiny_dataset_dir, tmp_path
):
    out = tmp_path / "run"
    config = tiny_config(tiny_dataset_dir, out, sampler="neighbor", n_layers=2)
    with pytest.raises(ConfigError, match="TinyMF has no sampled training"):
        train(config, model_builder=mf_builder)
    with pytest.raises(ConfigError, match="BPRMF has no graph to sample"):
        train(config.with_overrides(model="bprmf"))
    assert not out.exists()


PARTITIONED = dict(model="kgat", n_layers=2, partitions=2, batch_size=256, max_batches_per_epoch=None)


def test_partitioned_training_reports_its_split_and_resumes_exactly(tiny_dataset_dir, tmp_path):
    config = tiny_config(tiny_dataset_dir, tmp_path / "full", epochs=3, bits=2, **PARTITIONED)
    full = train(config)  # KGAT at 2 bits with dropout: CF and KG phases partition by partition
    assert full["partitions"] == 2 and len(full["partition_nodes"]) == 2
    assert full["partition_replication"] > 1.0  # a node shared by both partitions counts twice
    assert sum(full["partition_interactions"]) == len(KGDataset.open(tiny_dataset_dir).pairs("train"))
    assert len(full["kg_loss"]) == 3 and all(math.isfinite(x) for x in full["train_loss"])

    first = config.with_overrides(out=str(tmp_path / "split"), epochs=1)
    train(first)
    resumed = train(first.with_overrides(epochs=3, resume=True))
    assert resumed["resumed_at_epoch"] == 1
    assert comparable(resumed) == comparable(full)
    other_seed = train(config.with_overrides(out=str(tmp_path / "seed1"), seed=1, epochs=1))
    assert other_seed["train_loss"][0] != full["train_loss"][0]
