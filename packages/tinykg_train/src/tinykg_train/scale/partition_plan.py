"""The partitions partitioned training (`--partitions N`) visits: graphs, batches and negatives.

`kg_data.partition_edges` splits the train interactions by user into `N` parts; each part holds its
users, every entity within `hops` KG hops of its items (`hops` = the model's layers, 0 for LightGCN,
which follows no KG edge) and the KG triples among them. A `TrainingPartition` adds what training
reads: its graph, the CKG induced on its nodes (`edges`: positions in the full CKG's CSR, so per-edge
global quantities such as KGAT's attention are looked up as in sampled training), the items its
negatives are drawn from, and the KG triples its KG phase trains.

Self-sufficiency: a KG node within `hops - 1` hops of the part's items has every KG edge inside the
part, so an `L`-layer model (`L <= hops`) computes its items' KG side exactly as on the full graph;
what a part does not see are the interactions of other parts' users (the cut of the split).

Each train interaction belongs to exactly one part; each KG triple is trained by exactly one part
per epoch: a seeded uniform choice among the parts that hold both its ends (any part when none does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kg_data import CKG, KGDataset
from kg_data.negatives import ExcludingSampler, KGNegativeSampler
from kg_data.partition import PartitionPlan, partition_edges
from kg_data.unique import distinct_ids

#: Mixed into the seeds of the partition plan's own draws (triple owners), apart from every batch stream.
OWNER_STREAM = 0x9A27


def restrict_edges(ckg: CKG, positions: np.ndarray) -> CKG:
    """The CKG with only the edges at CSR `positions` (sorted), same node ids and sizes."""
    rows = np.repeat(np.arange(ckg.num_nodes, dtype=np.int64), ckg.degree)[positions]
    indptr = np.zeros(ckg.num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=ckg.num_nodes), out=indptr[1:])
    return CKG(
        indptr,
        ckg.indices[positions],
        ckg.relation[positions],
        ckg.n_entities,
        ckg.n_users,
        ckg.n_items,
        ckg.n_kg_relations,
    )


@dataclass(frozen=True, eq=False)
class TrainingPartition:
    """One part as training reads it (numpy; global ids). `nodes`: its CKG node ids (sorted),
    `edges`: CSR positions of the CKG edges among them, `pairs`: its (user, item) interactions,
    `items`: the distinct items of `pairs` (sorted), `triples`: the KG triples its KG phase trains,
    `seen_triples`: the triples among its nodes (the plan's; with `triples`, what it knows)."""

    index: int
    nodes: np.ndarray
    edges: np.ndarray
    pairs: np.ndarray
    items: np.ndarray
    triples: np.ndarray
    seen_triples: np.ndarray
    n_entities: int

    @property
    def known_triples(self) -> np.ndarray:
        """Every triple the partition sees (its own and those among its nodes), sorted and
        distinct: what its corrupted tails must avoid. Built when asked (for the partition being
        trained), not held for every partition: at 10M triples + interactions each is ~90 MiB."""
        return np.unique(np.concatenate([self.seen_triples, self.triples]), axis=0)

    def graph(self, ckg: CKG) -> CKG:
        """The partition's graph: `ckg` restricted to the edges among the partition's nodes."""
        return restrict_edges(ckg, self.edges)

    def negative_items(self) -> ExcludingSampler:
        """Draws item *ranks* in `items`, never one of the user's positives."""
        ranks = np.searchsorted(self.items, self.pairs[:, 1])
        return ExcludingSampler(self.pairs[:, 0], ranks, max(len(self.items), 1))

    def negative_tails(self) -> KGNegativeSampler:
        """Constraint-based corrupted tails: drawn from the tails each relation has in the partition."""
        return KGNegativeSampler(self.known_triples, self.n_entities)


@dataclass(frozen=True, eq=False)
class TrainingPartitions:
    """The partitions of a run and what the split costs (`replication`: nodes summed over the
    partitions / distinct nodes covered; 1.0 = no node copied)."""

    parts: list[TrainingPartition]
    plan: PartitionPlan

    def __len__(self) -> int:
        return len(self.parts)

    @property
    def replication(self) -> float:
        return float(self.plan.replication_factor)

    @property
    def nodes_per_partition(self) -> list[int]:
        return [len(part.nodes) for part in self.parts]

    def summary(self) -> dict[str, object]:
        """What metrics.json records about the split."""
        return {
            "partitions": len(self.parts),
            "partition_hops": self.plan.hops,
            "partition_replication": self.replication,
            "partition_nodes": self.nodes_per_partition,
            "partition_edges": [len(part.edges) for part in self.parts],
            "partition_interactions": [len(part.pairs) for part in self.parts],
            "partition_triples": [len(part.triples) for part in self.parts],
        }


def build_partitions(
    dataset: KGDataset, ckg: CKG, num_parts: int, hops: int, seed: int
) -> TrainingPartitions:
    """Split `dataset` into `num_parts` training partitions (see the module docstring)."""
    plan = partition_edges(dataset, num_parts, hops, seed, progress=True)
    heads, tails, _ = ckg.coo()
    triples = dataset.triples_array()
    inside = np.zeros((num_parts, ckg.num_nodes), dtype=bool)
    for part in plan.parts:
        inside[part.index, part.nodes] = True
    owner = triple_owners(inside[:, triples[:, 0]] & inside[:, triples[:, 2]], seed)
    parts = []
    for part in plan.parts:
        here = inside[part.index]
        own = triples[owner == part.index]
        parts.append(
            TrainingPartition(
                index=part.index,
                nodes=np.sort(part.nodes),
                edges=np.flatnonzero(here[heads] & here[tails]),
                pairs=part.pairs,
                items=distinct_ids(part.pairs[:, 1], dataset.n_items),
                triples=own,
                seen_triples=part.triples,
                n_entities=ckg.n_entities,
            )
        )
    return TrainingPartitions(parts, plan)


def triple_owners(holds: np.ndarray, seed: int) -> np.ndarray:
    """For `holds` `[P, T]` (part p holds both ends of triple t), one owner part per triple, uniform
    among its holders (among all parts for a triple no part holds), seeded."""
    holds = holds | ~holds.any(axis=0)  # an orphan triple: any part may train it
    count = holds.sum(axis=0)
    draw = np.random.default_rng([int(seed), OWNER_STREAM]).random(holds.shape[1])
    pick = np.minimum((draw * count).astype(np.int64), count - 1)
    # the owner is the holder of rank `pick`: the first part whose running holder count exceeds it
    return np.argmax(np.cumsum(holds, axis=0) > pick, axis=0)
