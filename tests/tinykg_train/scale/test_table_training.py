"""Row-wise tables in training (--sparse-adam, --offload-embeddings): the model's local path on
gathered rows trains exactly as torch's SparseAdam on the model's own tables; offloaded tables with a
small device cache and a look-ahead train to the same bits as tables on the device, through the
whole trainer and across a resume; metrics.json reports where the bytes are; bad settings refused."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from kg_data import CKG, BPRBatches, KGDataset
from tinykg_train.checkpoint import load_checkpoint
from tinykg_train.config import TrainConfig
from tinykg_train.errors import ConfigError
from tinykg_train.models import build_model
from tinykg_train.scale.sampled_training import step_rng
from tinykg_train.scale.table_training import TableTraining
from tinykg_train.sweep.space import parse_axis
from tinykg_train.trainer import train

LR = 0.05


def sampled_config(**overrides) -> TrainConfig:
    settings = dict(
        model="kgat", embed_dim=8, n_layers=2, fanouts=(3, 3), batch_size=64, lr=LR,
        sampler="neighbor", dropout=0.0, bits=32, device="cpu",
    )  # fmt: skip
    return TrainConfig(**{**settings, **overrides})


class SparseRows:
    """The reference `rows`: the model's own table, looked up with a sparse gradient."""

    def __init__(self, model) -> None:
        self.model = model

    def __call__(self, table, ids):
        return F.embedding(ids, getattr(self.model, table), sparse=True)


def sampled_steps(dataset, model, config, n_steps):
    sampler = model.step_sampler(CKG.from_dataset(dataset), config.layer_fanouts)
    batches = BPRBatches(dataset, config.batch_size, config.seed).epoch(0)
    for index, (users, pos, neg) in zip(range(n_steps), batches, strict=False):
        graph = sampler.sample(users.numpy(), pos.numpy(), neg.numpy(), step_rng(0, 0, index))
        yield users, pos, neg, graph


@pytest.mark.parametrize("model_name", ["kgat", "kgin"])
@pytest.mark.parametrize("offload", [False, True], ids=["on-device", "offloaded"])
def test_row_tables_train_the_local_path_as_torch_sparse_adam_does(
    model_name, offload, tiny_dataset_dir
):
    dataset = KGDataset.open(tiny_dataset_dir)
    config = sampled_config(model=model_name, offload_embeddings=offload, sparse_adam=not offload)
    config = config.with_overrides(cache_rows=700) if offload else config
    torch.manual_seed(0)
    reference = build_model(model_name, dataset, config)
    model = copy.deepcopy(reference)
    tables = [getattr(reference, name) for name in reference.embedding_tables]
    others = [p for p in reference.parameters() if all(p is not t for t in tables)]
    sparse_adam = torch.optim.SparseAdam(tables, lr=LR)
    dense_adam = torch.optim.Adam(others, lr=LR)

    training = TableTraining(model, config, torch.device("cpu"))
    adam = torch.optim.Adam(training.dense_parameters(), lr=LR)
    steps = list(sampled_steps(dataset, reference, config, 6))
    for index, batch in enumerate(training.lookahead(iter(steps))):
        torch.manual_seed(index)  # the same draws for both (KGIN drops edges at random)
        expected = reference.local_loss(*batch, SparseRows(reference))
        expected.backward()
        sparse_adam.step(), dense_adam.step()
        sparse_adam.zero_grad(), dense_adam.zero_grad()

        torch.manual_seed(index)
        got = training.cf_loss(*batch)
        got.backward()
        adam.step(), training.step()
        adam.zero_grad()
        assert torch.equal(got, expected)
    training.end_phase()
    for name in reference.embedding_tables:
        assert torch.equal(training.tables.table(name), getattr(reference, name))
    with training.whole_tables():  # the model reads its whole tables again, as trained
        for key, value in model.state_dict().items():
            assert torch.equal(value, reference.state_dict()[key]), key
    assert all(p.shape[0] == 0 for p in training.parameters.values())  # out of the model again
    if offload:
        stats = training.tables.stats()
        assert sum(stats[n]["evicted"] for n in reference.embedding_tables) > 0


def run_config(data, out, **overrides) -> TrainConfig:
    settings = dict(
        data=str(data), out=str(out), epochs=3, seed=0, max_batches_per_epoch=4, bits=2,
        dropout=0.2, kg_batch_size=128,
    )  # fmt: skip
    return sampled_config(**{**settings, **overrides})


COMPARED = ("train_loss", "kg_loss", "valid_history", "recall@20", "ndcg@20", "best_epoch")


def table_state(run_dir) -> dict:
    return load_checkpoint(run_dir / "checkpoint.pt")["row_tables"]["tables"]


def test_offloaded_tables_train_to_the_bits_of_tables_on_the_device_and_resume_exactly(
    tiny_dataset_dir, tmp_path
):
    """KGAT INT2, CF and KG phases, dropout on: a device cache smaller than the table (evictions,
    write-backs), a look-ahead of 3 steps; then the offloaded run split by a resume."""
    on_device = train(run_config(tiny_dataset_dir, tmp_path / "device", sparse_adam=True))
    offload = dict(offload_embeddings=True, cache_rows=700, prefetch_steps=3)
    offloaded = train(run_config(tiny_dataset_dir, tmp_path / "offload", **offload))
    assert {k: offloaded[k] for k in COMPARED} == {k: on_device[k] for k in COMPARED}
    device_state, offload_state = (
        table_state(tmp_path / "device"),
        table_state(tmp_path / "offload"),
    )
    for key in ("weight", "exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(
            offload_state["node_embedding"][key], device_state["node_embedding"][key]
        )

    report = offloaded["row_tables"]  # metrics.json: settings, bytes by place, cache counts
    assert report["tables"] == ["node_embedding"] and report["offload"] is True
    assert (report["cache_rows"], report["prefetch_steps"]) == (700, 3)
    stats, memory = report["stats"]["node_embedding"], report["memory"]
    assert stats["capacity"] == 700 and stats["misses"] > 0 and stats["hits"] > 0
    assert stats["evicted"] > 0 and stats["written_back"] > 0 and stats["prefetched"] > 0
    assert report["stats"]["all"]["hints_mismatched"] == 0
    n_nodes, dim = offload_state["node_embedding"]["weight"].shape
    assert (
        memory["host_tables"] == n_nodes * dim * 4
        and memory["host_optimizer"] == 2 * n_nodes * dim * 4
    )
    assert memory["device_tables"] == 700 * dim * 4  # the cache only
    assert on_device["row_tables"]["memory"]["host"] == 0
    assert offloaded["config"]["offload_embeddings"] is True
    assert offloaded["n_parameters"] == on_device["n_parameters"]  # the whole model at the end

    first = run_config(tiny_dataset_dir, tmp_path / "split", epochs=1, **offload)
    train(first)
    resumed = train(first.with_overrides(epochs=3, resume=True, cache_rows=900))
    assert resumed["resumed_at_epoch"] == 1
    assert {k: resumed[k] for k in COMPARED} == {k: offloaded[k] for k in COMPARED}
    split_state = table_state(tmp_path / "split")["node_embedding"]
    assert all(torch.equal(split_state[k], offload_state["node_embedding"][k]) for k in split_state)


def test_a_growing_cache_is_emptied_before_whole_table_blocks_and_keeps_the_on_device_bits(
    tiny_dataset_dir, tmp_path
):
    """Without `cache_rows` the cache gives its memory up before every attention refresh and
    evaluation (KGAT: twice an epoch) and grows back over the next steps, to the same bits."""
    on_device = train(run_config(tiny_dataset_dir, tmp_path / "device", sparse_adam=True))
    offloaded = train(
        run_config(tiny_dataset_dir, tmp_path / "offload", offload_embeddings=True, prefetch_steps=2)
    )
    assert {k: offloaded[k] for k in COMPARED} == {k: on_device[k] for k in COMPARED}
    device_state = table_state(tmp_path / "device")["node_embedding"]
    offload_state = table_state(tmp_path / "offload")["node_embedding"]
    assert all(torch.equal(offload_state[k], device_state[k]) for k in device_state)
    stats = offloaded["row_tables"]["stats"]["node_embedding"]
    assert stats["emptied"] >= 3 and stats["written_back"] > 0, stats
    assert stats["grown"] >= 3  # grew back in every epoch (blocks between two steps empty it once)


@pytest.mark.parametrize(
    ("sampling", "cache_rows"),
    [(dict(), 700), (dict(sampler="none", fanouts=None), 1000)],
    ids=["sampled", "every-neighbor"],
)
def test_partitioned_training_with_offloaded_tables_matches_tables_on_the_device_and_resumes(
    sampling, cache_rows, tiny_dataset_dir, tmp_path
):
    """--partitions 3, KGAT INT2 (CF and KG phases, the KG phase's rows read on demand): a cache
    smaller than the table and a look-ahead of 2 steps give the bits of on-device row tables, the
    steps of one partition hit the rows the previous ones loaded, and a resume repeats the run."""
    settings = dict(partitions=3, **sampling)
    on_device = train(run_config(tiny_dataset_dir, tmp_path / "device", sparse_adam=True, **settings))
    offload = dict(offload_embeddings=True, cache_rows=cache_rows, prefetch_steps=2, **settings)
    offloaded = train(run_config(tiny_dataset_dir, tmp_path / "offload", **offload))
    assert {k: offloaded[k] for k in COMPARED} == {k: on_device[k] for k in COMPARED}
    assert offloaded["partitions"] == on_device["partitions"]
    assert all(loss > 0 for loss in offloaded["kg_loss"])
    device_state = table_state(tmp_path / "device")["node_embedding"]
    offload_state = table_state(tmp_path / "offload")["node_embedding"]
    assert all(torch.equal(offload_state[k], device_state[k]) for k in device_state)
    stats = offloaded["row_tables"]["stats"]["node_embedding"]
    assert stats["hits"] > 0 and stats["misses"] > 0 and stats["evicted"] > 0
    assert len(offload_state["weight"]) > cache_rows  # the cache holds part of the table

    first = run_config(tiny_dataset_dir, tmp_path / "split", epochs=1, **offload)
    train(first)
    resumed = train(first.with_overrides(epochs=3, resume=True))
    assert resumed["resumed_at_epoch"] == 1
    assert {k: resumed[k] for k in COMPARED} == {k: offloaded[k] for k in COMPARED}


def test_sparse_adam_differs_from_the_dense_adam_of_plain_sampled_training(
    tiny_dataset_dir, tmp_path
):
    """What the equivalence is not: dense Adam moves rows a step did not read (momentum), so plain
    sampled training is another optimizer than the row tables, not the same numbers."""
    # at 32 bits, so that only the optimizers differ (INT2's rounding draws move four steps'
    # losses by a few percent on their own)
    plain = train(run_config(tiny_dataset_dir, tmp_path / "plain", epochs=1, bits=32))
    rows = train(
        run_config(tiny_dataset_dir, tmp_path / "rows", epochs=1, bits=32, sparse_adam=True)
    )
    assert plain["train_loss"][0] == pytest.approx(rows["train_loss"][0], rel=0.05)
    assert plain["train_loss"] != rows["train_loss"] and "row_tables" not in plain


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(sampler="none", fanouts=None, offload_embeddings=True), "--offload-embeddings trains through the sampled local path: add --sampler neighbor (or --partitions N)"),
        (dict(sampler="none", fanouts=None, sparse_adam=True), "--sparse-adam trains through the sampled local path"),
        (dict(offload_embeddings=True, workers=2), "--offload-embeddings updates the tables in one process: drop --workers"),
        (dict(offload_embeddings=True, bits="auto"), "--offload-embeddings runs at fixed widths: pass --bits 1, 2, 4, 8 or 32, not auto"),
        (dict(cache_rows=100), "'cache_rows' sizes the device cache of offloaded tables: add --offload-embeddings"),
        (dict(offload_embeddings=True, cache_rows=0), "'cache_rows' needs to be a positive integer or null (got 0)"),
        (dict(offload_embeddings=True, prefetch_steps=-1), "'prefetch_steps' needs to be >= 0"),
    ],
)  # fmt: skip
def test_bad_row_table_settings_are_refused_with_one_line(settings, message):
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        sampled_config(**settings)


def test_a_model_without_row_tables_is_refused_before_anything_is_written(
    tiny_dataset_dir, tmp_path
):
    out = tmp_path / "run"
    config = run_config(tiny_dataset_dir, out, model="bprmf", n_layers=0, fanouts=None)
    with pytest.raises(ConfigError, match="BPRMF has no graph to sample: train it with --sampler none"):  # fmt: skip
        train(config.with_overrides(offload_embeddings=True))
    assert not out.exists()


def test_row_table_settings_are_sweep_axes():
    train_settings = {"model": "kgat", "sampler": "neighbor", "n_layers": 2, "fanouts": [3, 3]}
    axis = parse_axis("offload_embeddings", [False, True], train_settings)
    assert tuple(axis.values) == (False, True)
    cache = parse_axis("cache_rows", [1000, 10000], {**train_settings, "offload_embeddings": True})
    assert tuple(cache.values) == (1000, 10000)
    with pytest.raises(ConfigError, match="add --sampler neighbor"):
        parse_axis("offload_embeddings", [True], {"model": "kgat"})


def test_a_finished_run_leaves_no_prefetch_thread_behind(tiny_dataset_dir, tmp_path):
    """`train` stops and joins the offloaded tables' look-ahead thread before it returns (a daemon
    thread alive at interpreter exit can be frozen inside a torch call as the process tears down)."""
    import threading

    def prefetchers():
        return [t for t in threading.enumerate() if t.name == "tinykg-prefetch" and t.is_alive()]

    before = len(prefetchers())
    offload = dict(offload_embeddings=True, cache_rows=700, prefetch_steps=3)
    result = train(run_config(tiny_dataset_dir, tmp_path / "offload", epochs=1, **offload))
    assert result["row_tables"]["stats"]["node_embedding"]["prefetched"] > 0  # the thread ran
    assert len(prefetchers()) == before
