"""SampledBatches: what each step sees is a pure function of (seed, epoch), whatever the thread
timing; the sampling thread stops with its epoch however it ends; models that cannot sample refuse."""

from __future__ import annotations

import random
import time

import pytest
import torch

from kg_data import BPRBatches
from tinykg_train.config import TrainConfig
from tinykg_train.errors import ConfigError, TinyKGError
from tinykg_train.models import build_model
from tinykg_train.scale.sampled_training import SampledBatches, sampled_batches


def config(**overrides) -> TrainConfig:
    settings = dict(model="kgat", embed_dim=8, n_layers=2, batch_size=128, sampler="neighbor")
    return TrainConfig(**{**settings, **overrides})


def source(dataset, **overrides) -> SampledBatches:
    settings = config(**overrides)
    model = build_model(settings.model, dataset, settings)
    cf = BPRBatches(dataset, settings.batch_size, settings.seed)
    return sampled_batches(settings, dataset, model, cf)


class Jittery:
    """A sampler that sleeps a random while before each draw (another thread timing)."""

    def __init__(self, sampler) -> None:
        self.sampler, self.random = sampler, random.Random(0)

    def sample(self, *args):
        time.sleep(self.random.random() * 0.01)
        return self.sampler.sample(*args)


def epoch_graphs(batches: SampledBatches, epoch: int) -> list[tuple[torch.Tensor, ...]]:
    with batches.running(epoch):
        return [
            (users, graph.node, graph.edge_id, graph.edge_index)
            for users, _, _, graph in batches.epoch(epoch)
        ]


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, y)
        for left, right in zip(a, b, strict=True)
        for x, y in zip(left, right, strict=True)
    )


def test_steps_are_a_pure_function_of_seed_and_epoch_whatever_the_timing(dataset):
    plain, jittery, other_seed = source(dataset), source(dataset), source(dataset, seed=1)
    jittery.sampler = Jittery(jittery.sampler)
    first = epoch_graphs(plain, 1)
    assert len(first) == len(plain) > 1
    assert same(first, epoch_graphs(jittery, 1))
    assert same(first, epoch_graphs(plain, 1))  # again: nothing carried over between epochs
    assert not same(first, epoch_graphs(plain, 2))
    assert not same(first, epoch_graphs(other_seed, 1))


def test_the_thread_stops_with_its_epoch_however_it_ends(dataset):
    batches = source(dataset)
    with batches.running(0):
        next(iter(batches.epoch(0)))
        producer = batches._producer
    assert not producer.alive  # an epoch cut short (max_batches_per_epoch)
    with pytest.raises(KeyboardInterrupt), batches.running(1):
        next(iter(batches.epoch(1)))
        producer = batches._producer
        raise KeyboardInterrupt
    assert not producer.alive
    stats = batches.epoch_stats()
    assert stats["sampler_wait_seconds"] >= 0 and stats["sampled_nodes_per_step"] > 0


def test_batches_are_read_only_while_their_epoch_runs(dataset):
    batches = source(dataset)
    with pytest.raises(TinyKGError, match=r"read inside running\(0\)"):
        next(iter(batches.epoch(0)))
    with batches.running(1), pytest.raises(TinyKGError, match=r"running\(0\)"):
        next(iter(batches.epoch(0)))


def test_whole_graph_training_has_no_sampled_source(dataset):
    settings = config(sampler="none")
    model = build_model("kgat", dataset, settings)
    assert sampled_batches(settings, dataset, model, BPRBatches(dataset, 128, 0)) is None


def test_models_that_cannot_sample_refuse_in_one_line(dataset):
    with pytest.raises(ConfigError, match="BPRMF has no graph to sample"):
        source(dataset, model="bprmf")

    class OwnModel(torch.nn.Module):
        pass

    with pytest.raises(ConfigError, match="OwnModel has no sampled training"):
        sampled_batches(config(), dataset, OwnModel(), BPRBatches(dataset, 128, 0))
