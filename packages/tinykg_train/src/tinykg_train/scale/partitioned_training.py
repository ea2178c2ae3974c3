"""Partitioned training (`--partitions N`): the epoch visits the graph's partitions one at a time.

Each epoch visits the partitions (`scale.partition_plan`) in a seeded order. In the CF phase a
partition's steps are edge mini-batches of its own interactions (each train interaction once per
epoch), negatives drawn from its items (never a positive of the user), and each step propagates
over the step's `n_layers`-hop neighborhood *within the partition's graph* (every neighbor, or
`--fanouts` of them with `--sampler neighbor`), through the models' local path as in sampled
training (`model.step_sampler` on the partition's graph, `model.local_loss`). Only one partition's
graph exists at a time (built in the producer thread when its first step is made), and a step reads
only rows of its partition's nodes. The KG phase (KGAT) visits the partitions in the same order:
TransR on the triples a partition owns, with constraint-based corrupted tails (drawn from the tails
the relation has in the partition) and the user-item triples drawn from its interactions.

Determinism: the order, the batches and the negatives come from generators seeded by
`(seed, epoch[, partition])`, step `i`'s neighborhood by `(seed, epoch, i)` (`step_rng`): an epoch is
a pure function of `(seed, epoch)`, so a resumed run repeats the uninterrupted one.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from kg_data.unique import distinct_ids
from tinykg_train.errors import ConfigError
from tinykg_train.scale.partition_plan import (
    TrainingPartition,
    TrainingPartitions,
    build_partitions,
)
from tinykg_train.scale.sampled_training import SampledBatches, step_rng

ORDER_STREAM, CF_STREAM, KG_STREAM = 0x9A28, 0x9A29, 0x9A2A  # kept apart from every other stream


def partition_order(seed: int, epoch: int, count: int) -> np.ndarray:
    """The order the partitions are visited in, in `epoch`."""
    return np.random.default_rng([int(seed), int(epoch), ORDER_STREAM]).permutation(count)


def partition_rng(seed: int, epoch: int, index: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(epoch), int(index), stream])


def steps_of(size: int, batch_size: int) -> int:
    return math.ceil(size / batch_size)


class OnePartitionAtATime:
    """`build(partition)` for the partition an epoch is in, the previous one's dropped first (the
    partition graphs' samplers; the negative samplers, which held at once for every partition took
    840 MiB at 10M triples + interactions). Built from the partition alone, so a rebuilt sampler
    draws what a kept one would."""

    def __init__(self, build: Callable[[int], Any]) -> None:
        self.build, self.current = build, None

    def __call__(self, index: int) -> Any:
        if self.current is None or self.current[0] != index:
            self.current = None
            self.current = (index, self.build(index))
        return self.current[1]

    def release(self) -> None:
        self.current = None


class PartitionCFBatches:
    """`epoch(e)` yields `(partition, users, pos_items, neg_items)`: every partition's interactions
    once, shuffled, in batches of `batch_size`, partition by partition."""

    def __init__(self, partitions: TrainingPartitions, batch_size: int, seed: int) -> None:
        self.partitions, self.batch_size, self.seed = partitions, int(batch_size), int(seed)
        self.negatives = OnePartitionAtATime(lambda index: partitions.parts[index].negative_items())

    def __len__(self) -> int:
        return sum(steps_of(len(part.pairs), self.batch_size) for part in self.partitions.parts)

    def epoch(self, epoch: int) -> Iterator[tuple]:
        try:
            yield from self._batches(epoch)
        finally:
            self.negatives.release()  # the evaluation after the epoch does not hold them

    def _batches(self, epoch: int) -> Iterator[tuple]:
        parts = self.partitions.parts
        for index in partition_order(self.seed, epoch, len(parts)):
            part, rng = parts[index], partition_rng(self.seed, epoch, index, CF_STREAM)
            order = rng.permutation(len(part.pairs))
            for start in range(0, len(order), self.batch_size):
                users, items = part.pairs[order[start : start + self.batch_size]].T
                ranks = self.negatives(index).draw(
                    users,
                    len(part.items),
                    rng,
                    f"user {{}} has every item of partition {index} as a positive".format,
                )
                yield (
                    int(index),
                    *(
                        torch.from_numpy(np.ascontiguousarray(a))
                        for a in (users, items, part.items[ranks])
                    ),
                )


class PartitionKGBatches:
    """The KG phase's source: `epoch(e)` yields `(heads, relations, tails, neg_tails, users,
    items, neg_items)` per step, partition by partition in the CF phase's order: the triples the
    partition owns (each KG triple once per epoch), corrupted tails from the relation's tails in the
    partition, and as many of its interactions (users as CKG nodes) with a random item of it each."""

    def __init__(self, partitions: TrainingPartitions, batch_size: int, seed: int) -> None:
        self.partitions, self.batch_size, self.seed = partitions, int(batch_size), int(seed)
        self.negatives = OnePartitionAtATime(lambda index: partitions.parts[index].negative_tails())

    def __len__(self) -> int:
        return sum(steps_of(len(part.triples), self.batch_size) for part in self.partitions.parts)

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, ...]]:
        try:
            yield from self._batches(epoch)
        finally:
            self.negatives.release()

    def _batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, ...]]:
        parts = self.partitions.parts
        for index in partition_order(self.seed, epoch, len(parts)):
            part, rng = parts[index], partition_rng(self.seed, epoch, index, KG_STREAM)
            order = rng.permutation(len(part.triples))
            for start in range(0, len(order), self.batch_size):
                heads, relations, tails = part.triples[order[start : start + self.batch_size]].T
                neg_tails = self.negatives(index).sample(heads, relations, rng=rng)
                users, items, neg_items = self.interactions(part, len(heads), rng)
                yield tuple(
                    torch.from_numpy(np.ascontiguousarray(a))
                    for a in (heads, relations, tails, neg_tails, users, items, neg_items)
                )

    @staticmethod
    def interactions(
        part: TrainingPartition, n: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        picked = part.pairs[rng.integers(len(part.pairs), size=n)]
        return picked[:, 0] + part.n_entities, picked[:, 1], rng.choice(part.items, size=n)


def partition_sampler(model: Any, part: TrainingPartition, ckg: Any, fanouts: tuple[int, ...]):
    """`model.step_sampler` on the partition's graph, its edge ids mapped to the full CKG's CSR."""
    sampler = model.step_sampler(part.graph(ckg), fanouts)
    if hasattr(sampler, "origin"):  # NeighborStepSampler: edge ids of the graph it was given
        sampler.origin = part.edges if sampler.origin is None else part.edges[sampler.origin]
    return sampler


class PartitionedBatches(SampledBatches):
    """The CF source of partitioned training: `SampledBatches` whose batches come partition by
    partition and whose subgraphs are drawn within their partition's graph."""

    def __init__(
        self,
        model: Any,
        partitions: TrainingPartitions,
        ckg: Any,
        fanouts: tuple[int, ...],
        batch_size: int,
        seed: int,
    ) -> None:
        super().__init__(model, PartitionCFBatches(partitions, batch_size, seed), None, seed)
        self.partitions, self.ckg, self.fanouts = partitions, ckg, tuple(fanouts)
        # the sampler of the partition the producer is in: one partition's graph at a time
        self.samplers = OnePartitionAtATime(
            lambda index: partition_sampler(model, partitions.parts[index], ckg, self.fanouts)
        )

    @contextlib.contextmanager
    def running(self, epoch: int) -> Iterator[SampledBatches]:
        """`SampledBatches.running`; when the block ends the last partition's graph and sampler go
        too, so the evaluation after the epoch does not hold them (at 1M triples + interactions
        the run's peak RSS fell from 1,704 to 1,645 MiB)."""
        try:
            with super().running(epoch) as batches:
                yield batches
        finally:
            self.samplers.release()

    def make(self, epoch: int, index: int, batch: tuple) -> tuple:
        part, users, pos_items, neg_items = batch
        graph = self.samplers(part).sample(
            users.numpy(), pos_items.numpy(), neg_items.numpy(), step_rng(self.seed, epoch, index)
        )
        return users, pos_items, neg_items, graph

    def epoch_stats(self) -> dict[str, float]:
        nodes = self.partitions.nodes_per_partition
        return {
            **super().epoch_stats(),
            "partition_replication": self.partitions.replication,
            "partition_nodes_mean": float(np.mean(nodes)),
            "partition_nodes_max": float(max(nodes)),
        }

    def kg_loss(self, heads, relations, tails, neg_tails, users, items, neg_items):
        interactions = (users, items, neg_items)
        if self.tables is not None:  # row-wise (or offloaded) tables: rows gathered on demand
            return self.tables.kg_loss(
                heads, relations, tails, neg_tails, interactions=interactions
            )
        return self.model.kg_loss(
            heads,
            relations,
            tails,
            neg_tails,
            rows=self.model.parameter_rows(),
            interactions=interactions,
        )

    def partition_summary(self) -> dict[str, Any]:
        """The split's figures for metrics.json (`TrainingPartitions.summary`)."""
        return self.partitions.summary()


def partitioned_batches(
    config: Any, dataset: Any, model: Any
) -> tuple[PartitionedBatches, PartitionKGBatches | None] | None:
    """The CF and KG sources of `config.partitions` (1: None, whole-graph or sampled training); a
    model that cannot train on a subgraph raises ConfigError here, before the run writes anything."""
    if config.partitions == 1:
        return None
    from kg_data import CKG

    if not hasattr(model, "step_sampler") or not hasattr(model, "local_loss"):
        raise ConfigError(
            f"{type(model).__name__} has no local path (step_sampler, local_loss) to train a partition with: drop --partitions"
        )
    users = len(distinct_ids(dataset.pairs("train")[:, 0], dataset.n_users))
    if config.partitions > users:
        raise ConfigError(
            f"--partitions {config.partitions} exceeds the {users} users with train interactions "
            f"(partitions split the users): pass at most {users}"
        )
    ckg = CKG.from_dataset(dataset)
    hops = config.n_layers if getattr(model, "follows_kg", True) else 0
    partitions = build_partitions(dataset, ckg, config.partitions, hops, config.seed)
    fanouts = config.layer_fanouts if config.sampler == "neighbor" else (-1,) * config.n_layers
    cf = PartitionedBatches(model, partitions, ckg, fanouts, config.batch_size, config.seed)
    kg = (
        PartitionKGBatches(partitions, config.kg_batch_size, config.seed)
        if model.has_kg_phase
        else None
    )
    return cf, kg
