"""Self-sufficient partitions for edge mini-batch training.

The train interactions are split into `P` parts by user (all of a user's edges stay together). Each
part carries its users, its items, every entity within `hops` KG hops of those items, and the KG
triples among them, so a model with `hops` KG layers can train on one part without the others.
Entities needed by several parts are copied into each: `replication_factor` measures that cost.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from tqdm import tqdm

from kg_data.csr import segment_offsets
from kg_data.dataset import KGDataset
from kg_data.errors import KGDataError
from kg_data.graph import CKG, INTERACTED_BY, open_dataset
from kg_data.unique import distinct_ids

METHODS = ("greedy", "random")


@dataclass(frozen=True, eq=False)
class Part:
    """One part: global ids of its users and entities, its interaction edges and its KG triples."""

    index: int
    users: np.ndarray
    entities: np.ndarray
    pairs: np.ndarray
    triples: np.ndarray
    n_entities: int

    @property
    def nodes(self) -> np.ndarray:
        """CKG node ids of the part: its entities, then its users (`n_entities + user`)."""
        return np.concatenate([self.entities, self.users + self.n_entities])

    @property
    def num_nodes(self) -> int:
        return len(self.entities) + len(self.users)

    def __repr__(self) -> str:
        return (
            f"Part({self.index}, users={len(self.users)}, entities={len(self.entities)}, "
            f"interactions={len(self.pairs)}, triples={len(self.triples)})"
        )


@dataclass(frozen=True, eq=False)
class PartitionPlan:
    """The parts, the hops their KG neighborhoods cover, and what the split costs."""

    parts: list[Part]
    hops: int
    method: str
    num_nodes: int

    @cached_property
    def replication_factor(self) -> float:
        """Sum of the parts' node counts over the number of distinct nodes they cover (1.0 = no copies)."""
        covered = np.unique(np.concatenate([part.nodes for part in self.parts]))
        return sum(part.num_nodes for part in self.parts) / max(len(covered), 1)

    @property
    def edge_balance(self) -> float:
        """Largest part's interaction count over the mean (1.0 = perfectly balanced)."""
        sizes = np.array([len(part.pairs) for part in self.parts])
        return float(sizes.max() / sizes.mean())

    def __repr__(self) -> str:
        return (
            f"PartitionPlan(parts={len(self.parts)}, hops={self.hops}, method={self.method!r}, "
            f"replication_factor={self.replication_factor:.3f}, edge_balance={self.edge_balance:.3f})"
        )


def partition_edges(
    dataset: str | os.PathLike | KGDataset,
    num_parts: int,
    hops: int = 2,
    seed: int = 0,
    *,
    method: str = "greedy",
    progress: bool = False,
) -> PartitionPlan:
    """Split the train interactions into `num_parts` self-sufficient parts.

    `method="greedy"` streams the users in a seeded random order and puts each into the part that
    already holds most of its items, discounted by how full the part is (linear deterministic
    greedy); `"random"` cuts a seeded random user order into blocks of equal edge count.
    """
    if not isinstance(num_parts, (int, np.integer)) or isinstance(num_parts, bool) or num_parts < 1:
        raise KGDataError(f"'num_parts' needs to be a positive integer (got {num_parts!r})")
    if not isinstance(hops, (int, np.integer)) or isinstance(hops, bool) or hops < 0:
        raise KGDataError(f"'hops' needs to be a non-negative integer (got {hops!r})")
    if method not in METHODS:
        raise KGDataError(f"'method' needs to be one of {', '.join(METHODS)} (got {method!r})")
    ds = open_dataset(dataset)
    pairs = ds.pairs("train")
    users = distinct_ids(pairs[:, 0], ds.n_users)
    if num_parts > len(users):
        raise KGDataError(
            f"'num_parts' ({num_parts}) exceeds the {len(users)} users with train interactions"
        )
    order = np.random.default_rng(seed).permutation(users)
    assign = (
        _greedy(pairs, order, ds.n_users, ds.n_items, num_parts, progress)
        if method == "greedy"
        else _blocks(pairs, order, ds.n_users, num_parts)
    )
    ckg = CKG.from_dataset(ds)
    triples = ds.triples_array()
    parts = []
    for index in range(num_parts):
        part_pairs = pairs[assign[pairs[:, 0]] == index]
        entities = kg_neighborhood(ckg, distinct_ids(part_pairs[:, 1], ds.n_items), hops)
        inside = np.zeros(ds.n_entities, dtype=bool)
        inside[entities] = True
        part_triples = triples[inside[triples[:, 0]] & inside[triples[:, 2]]]
        parts.append(
            Part(
                index,
                distinct_ids(part_pairs[:, 0], ds.n_users),
                entities,
                part_pairs,
                part_triples,
                ds.n_entities,
            )
        )
    return PartitionPlan(parts, int(hops), method, ckg.num_nodes)


def kg_neighborhood(ckg: CKG, entities: np.ndarray, hops: int) -> np.ndarray:
    """Sorted entity ids within `hops` KG hops (either direction) of `entities`, themselves included."""
    reached = np.zeros(ckg.n_entities, dtype=bool)
    reached[entities] = True
    frontier = np.asarray(entities, np.int64)
    for _ in range(hops):
        starts = ckg.indptr[frontier]
        lengths = ckg.indptr[frontier + 1] - starts
        positions = np.repeat(starts, lengths) + segment_offsets(lengths)
        positions = positions[ckg.relation[positions] > INTERACTED_BY]  # KG edges only, not users
        neighbors = ckg.indices[positions]
        frontier = distinct_ids(neighbors[~reached[neighbors]], ckg.n_entities)
        reached[frontier] = True
    return np.flatnonzero(reached)


def _blocks(pairs: np.ndarray, order: np.ndarray, n_users: int, num_parts: int) -> np.ndarray:
    """Part of every user: `order` cut into P runs of equal edge count (a user goes where its middle edge falls)."""
    degree = np.bincount(pairs[:, 0], minlength=n_users)[order]
    middle = np.cumsum(degree) - degree / 2
    assign = np.full(n_users, -1, dtype=np.int64)
    assign[order] = np.minimum((middle * num_parts / len(pairs)).astype(np.int64), num_parts - 1)
    return assign


def _greedy(
    pairs: np.ndarray, order: np.ndarray, n_users: int, n_items: int, num_parts: int, progress: bool
) -> np.ndarray:
    """Linear deterministic greedy streaming: score = items already in the part * (1 - load / capacity).

    One pass over the users (a Python loop: partitioning is a one-off preprocessing step).
    """
    sorted_pairs = pairs[np.argsort(pairs[:, 0], kind="stable")]
    ptr = np.searchsorted(sorted_pairs[:, 0], np.arange(n_users + 1))
    capacity = len(pairs) / num_parts * 1.05
    holds = np.zeros((num_parts, n_items), dtype=bool)
    load = np.zeros(num_parts)
    assign = np.full(n_users, -1, dtype=np.int64)
    for user in tqdm(order, desc="partition users", disable=not progress, leave=False):
        items = sorted_pairs[ptr[user] : ptr[user + 1], 1]
        room = np.maximum(1.0 - load / capacity, 0.0)
        score = (
            holds[:, items].sum(axis=1) * room + room * 1e-9
        )  # ties and empty parts: most room wins
        best = int(np.argmax(np.where(load + len(items) <= capacity, score, -1.0)))
        best = best if load[best] + len(items) <= capacity else int(np.argmin(load))
        assign[user] = best
        load[best] += len(items)
        holds[best, items] = True
    return assign
