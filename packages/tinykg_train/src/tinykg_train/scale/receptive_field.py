"""KGCN's receptive field drawn afresh each step, in place of its fixed neighbor table.

KGCN aggregates each (user, item) pair over a tree: the item, `fanouts[0]` of its KG neighbors,
`fanouts[1]` of each of those, ... Whole-graph training reads the tree from a table fixed at start
(`kg_data.kg_neighbor_table`); sampled training draws every node of every step's trees anew from the
CKG's KG edges (both directions, relation ids folded to the KG's `0..R-1`), the way the table was
drawn: without replacement where a node has at least `k` neighbors, with replacement where it has
fewer, and an isolated entity points to itself (relation 0, a placeholder). Each tree position draws
on its own, so one entity met twice in a step may get two different neighbor sets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from kg_data import CKG
from kg_data.csr import sample_rows
from tinykg_train.errors import ConfigError
from tinykg_train.models.graphs import FIRST_KG_RELATION
from tinykg_train.scale.subgraphs import restrict_relations


@dataclass(frozen=True)
class ReceptiveField:
    """The trees of a batch's items (`pos_items` then `neg_items`, `2B` trees).

    `entities[h]` `[2B, prod(fanouts[:h])]` global entity ids at depth `h` (`entities[0]` the items),
    `relations[h]` `[2B, prod(fanouts[:h+1])]` the KG relation linking each depth-`h+1` entity to its
    parent, `fanouts` the neighbors per node at each depth.
    """

    entities: tuple[torch.Tensor, ...]
    relations: tuple[torch.Tensor, ...]
    fanouts: tuple[int, ...]

    @property
    def num_nodes(self) -> int:
        """Tree positions of the step (entities counted once per position)."""
        return sum(int(e.numel()) for e in self.entities)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ReceptiveField:
        return ReceptiveField(
            tuple(e.to(device, non_blocking=non_blocking) for e in self.entities),
            tuple(r.to(device, non_blocking=non_blocking) for r in self.relations),
            self.fanouts,
        )


class ReceptiveFieldSampler:
    """`sample(users, pos_items, neg_items, rng) -> ReceptiveField` over the CKG's KG edges."""

    def __init__(self, ckg: CKG, fanouts: Sequence[int]) -> None:
        if any(k < 1 for k in fanouts):
            raise ConfigError(
                f"KGCN draws a fixed number of neighbors per node: give positive 'fanouts' "
                f"(got {list(fanouts)}; -1 = all neighbors does not fit its fixed-size trees)"
            )
        self.fanouts = tuple(int(k) for k in fanouts)
        kg_relations = range(FIRST_KG_RELATION, ckg.num_relations)
        view, _ = restrict_relations(ckg, kg_relations)
        self.indptr, self.indices = view.indptr, view.indices
        self.relation = (view.relation - FIRST_KG_RELATION) % max(ckg.n_kg_relations, 1)

    def draw(
        self, entities: np.ndarray, k: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """`k` KG neighbors of each entity and their relations, both `[len(entities), k]`."""
        starts = self.indptr[entities]
        degrees = self.indptr[entities + 1] - starts
        neighbors = np.repeat(entities[:, None], k, axis=1)
        relations = np.zeros((len(entities), k), dtype=np.int64)
        for replace, rows in (
            (False, np.flatnonzero(degrees >= k)),
            (True, np.flatnonzero((degrees > 0) & (degrees < k))),
        ):
            _, positions = sample_rows(starts[rows], degrees[rows], k, rng, replace=replace)
            neighbors[rows] = self.indices[positions].reshape(-1, k)
            relations[rows] = self.relation[positions].reshape(-1, k)
        return neighbors, relations

    def sample(
        self,
        users: np.ndarray,
        pos_items: np.ndarray,
        neg_items: np.ndarray,
        rng: np.random.Generator,
    ) -> ReceptiveField:
        items = np.concatenate([pos_items, neg_items]).astype(np.int64, copy=False)
        entities, relations = [items[:, None]], []
        for k in self.fanouts:
            neighbors, linked = self.draw(entities[-1].reshape(-1), k, rng)
            entities.append(neighbors.reshape(len(items), -1))
            relations.append(linked.reshape(len(items), -1))
        return ReceptiveField(
            tuple(torch.from_numpy(np.ascontiguousarray(e)) for e in entities),
            tuple(torch.from_numpy(r) for r in relations),
            self.fanouts,
        )
