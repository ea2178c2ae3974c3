"""Sampled training (`--sampler neighbor`): the CF phase's batch source and loss functions.

`SampledBatches` wraps the run's `BPRBatches`: each `(users, pos_items, neg_items)` batch comes
with its sampled subgraph (`model.step_sampler`), made by a `BackgroundProducer` while earlier
steps train. The trainer runs the same phase loop as whole-graph training, with this source and
`cf_loss` / `kg_loss` in place of the model's `loss` / `kg_loss`.

Determinism: the batches are `BPRBatches.epoch(e)`'s; batch `i`'s subgraph is drawn with its own
generator seeded by `(seed, e, i)`, so what a step sees is a pure function of `(seed, epoch)`,
whatever the thread timing, and a resumed run draws the same subgraphs again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from tinykg_train.errors import ConfigError, TinyKGError
from tinykg_train.scale.producer import BackgroundProducer

#: Mixed into each step's seed so the subgraph draws never share a stream with the batches'.
SUBGRAPH_STREAM = 0x5AB6
#: Batches sampled ahead of the step (the producer's queue depth).
QUEUE_DEPTH = 2


def step_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator of batch `index`'s subgraph in `epoch`."""
    return np.random.default_rng([int(seed), int(epoch), int(index), SUBGRAPH_STREAM])


def graph_size(graph: Any) -> int:
    """Nodes a step propagates over (for the epoch row)."""
    return int(graph.num_nodes)


class SampledBatches:
    """`epoch(e)` yields `(users, pos_items, neg_items, graph)`, inside `with running(e):`."""

    def __init__(self, model: Any, cf_batches: Any, sampler: Any, seed: int) -> None:
        self.model, self.cf_batches, self.sampler, self.seed = model, cf_batches, sampler, seed
        self._producer: BackgroundProducer | None = None
        self._epoch: int | None = None
        self._steps = self._nodes = 0
        self._wait_seconds = 0.0
        # `scale.table_training.TableTraining` under --sparse-adam / --offload-embeddings: the big
        # tables read through its gathered rows, the batches read ahead for its prefetch
        self.tables: Any = None

    def __len__(self) -> int:
        return len(self.cf_batches)

    def make(self, epoch: int, index: int, batch: tuple) -> tuple:
        """Batch `index` with its subgraph (runs in the producer thread)."""
        users, pos_items, neg_items = batch
        graph = self.sampler.sample(
            users.numpy(), pos_items.numpy(), neg_items.numpy(), step_rng(self.seed, epoch, index)
        )
        return users, pos_items, neg_items, graph

    @contextlib.contextmanager
    def running(self, epoch: int) -> Iterator[SampledBatches]:
        """Sample `epoch`'s batches in the background for the block; the thread stops when it ends,
        however it ends (a capped epoch, an error, Ctrl-C)."""
        producer = BackgroundProducer(
            self.cf_batches.epoch(epoch),
            lambda index, batch: self.make(epoch, index, batch),
            depth=QUEUE_DEPTH,
        )
        self._producer, self._epoch, self._steps, self._nodes = producer, epoch, 0, 0
        try:
            yield self
        finally:
            producer.close()
            self._producer, self._wait_seconds = None, producer.wait_seconds

    def epoch(self, epoch: int) -> Iterator[tuple]:
        producer = self._producer
        if producer is None or self._epoch != epoch:
            raise TinyKGError(f"sampled batches of epoch {epoch} are read inside running({epoch})")
        items = producer if self.tables is None else self.tables.lookahead(producer)
        for item in items:
            self._steps += 1
            self._nodes += graph_size(item[3])
            yield item

    @property
    def wait_seconds(self) -> float:
        """Seconds the steps of the running (else the last) epoch waited for their subgraphs."""
        return self._wait_seconds if self._producer is None else self._producer.wait_seconds

    def epoch_stats(self) -> dict[str, float]:
        """The last epoch's sampling figures for its row: seconds its steps waited for their
        subgraphs (the sampler is the bottleneck when this grows), nodes per step."""
        return {
            "sampler_wait_seconds": self._wait_seconds,
            "sampled_nodes_per_step": self._nodes / max(self._steps, 1),
        }

    # -- the losses the phases call -------------------------------------------------------------

    def cf_loss(self, users, pos_items, neg_items, graph):
        if self.tables is not None:
            return self.tables.cf_loss(users, pos_items, neg_items, graph)
        return self.model.local_loss(
            users, pos_items, neg_items, graph, self.model.parameter_rows()
        )

    def kg_loss(self, *batch):
        if self.tables is not None:
            return self.tables.kg_loss(*batch)
        return self.model.kg_loss(*batch, rows=self.model.parameter_rows())


def sampled_batches(
    config: Any, dataset: Any, model: Any, cf_batches: Any
) -> SampledBatches | None:
    """The CF source of `config.sampler` ("none": None, whole-graph steps); a model that cannot
    train on sampled subgraphs raises ConfigError here, before the run writes anything."""
    if config.sampler == "none":
        return None
    from kg_data import CKG

    if not hasattr(model, "step_sampler"):
        raise ConfigError(
            f"{type(model).__name__} has no sampled training (no step_sampler): use --sampler none"
        )
    # held for the whole run: its edge arrays at int32 (the same draws)
    ckg = CKG.from_dataset(dataset).narrowed()
    sampler = model.step_sampler(ckg, tuple(config.layer_fanouts))
    return SampledBatches(model, cf_batches, sampler, config.seed)
