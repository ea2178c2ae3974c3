"""Samplers of one CF step's subgraph, run in the sampling thread (numpy, no autograd).

`NeighborStepSampler` draws the `len(fanouts)`-hop neighborhood of a batch's users and items
(`kg_data.NeighborSampler`, without replacement, -1 = every neighbor) on the CKG or on a view of it
restricted to some relations (KGIN follows no item -> user edge, LightGCN only user-item edges), and
returns a `LocalGraph` whose `edge_id` are positions in the full CKG's CSR whatever the view.
A fanout counts a node's neighbors over all the relations followed (not per relation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from kg_data import CKG, NeighborSampler
from tinykg_train.errors import ConfigError
from tinykg_train.models.sparse import CSRGraph
from tinykg_train.scale.local_graph import LocalGraph


def restrict_relations(ckg: CKG, keep: Sequence[int]) -> tuple[CKG, np.ndarray]:
    """The CKG with only the edges of relations `keep`, and each kept edge's position in `ckg`."""
    mask = np.isin(ckg.relation, np.asarray(list(keep), dtype=np.int64))
    origin = np.flatnonzero(mask)
    rows = np.repeat(np.arange(ckg.num_nodes, dtype=np.int64), ckg.degree)[origin]
    indptr = np.zeros(ckg.num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=ckg.num_nodes), out=indptr[1:])
    view = CKG(
        indptr,
        ckg.indices[origin],
        ckg.relation[origin],
        ckg.n_entities,
        ckg.n_users,
        ckg.n_items,
        ckg.n_kg_relations,
    )
    return view, origin


def batch_seeds(
    users: np.ndarray, pos_items: np.ndarray, neg_items: np.ndarray, n_entities: int
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The distinct CKG nodes of a batch (sorted) and each batch row's position among them."""
    nodes = np.concatenate([np.asarray(users, np.int64) + n_entities, pos_items, neg_items])
    seeds, inverse = np.unique(nodes, return_inverse=True)
    n_users, n_pos = len(users), len(pos_items)
    return seeds, (
        inverse[:n_users],
        inverse[n_users : n_users + n_pos],
        inverse[n_users + n_pos :],
    )


class NeighborStepSampler:
    """`sample(users, pos_items, neg_items, rng) -> LocalGraph` (see the module docstring).

    `relations`: the CKG relations followed (None: all); `prepare(graph) -> graph`: the model's
    structure-only derivations (a CSR of the local edges...), run here, in the sampling thread.
    """

    def __init__(
        self,
        ckg: CKG,
        fanouts: Sequence[int],
        *,
        relations: Sequence[int] | None = None,
        prepare: Callable[[LocalGraph], LocalGraph] | None = None,
    ) -> None:
        if not fanouts:
            raise ConfigError(
                "sampled training needs at least one layer to sample for (n_layers >= 1)"
            )
        self.n_entities = ckg.n_entities
        self.origin: np.ndarray | None = None
        if relations is not None:
            ckg, self.origin = restrict_relations(ckg, relations)
        self.sampler = NeighborSampler(ckg, fanouts)
        self.prepare = prepare

    def sample(
        self,
        users: np.ndarray,
        pos_items: np.ndarray,
        neg_items: np.ndarray,
        rng: np.random.Generator,
    ) -> LocalGraph:
        seeds, batch = batch_seeds(users, pos_items, neg_items, self.n_entities)
        subgraph = self.sampler.sample(seeds, rng=rng)
        if self.origin is not None:
            subgraph = replace(subgraph, edge_id=self.origin[subgraph.edge_id])
        graph = LocalGraph.from_sampled(subgraph, batch)
        return graph if self.prepare is None else self.prepare(graph)


def layer_blocks(graph: LocalGraph) -> LocalGraph:
    """`graph` with `aux["blocks"]`: one `CSRGraph` per layer (first to last) over the layer's
    block (`LocalGraph.block`): its targets, its sources, the edges into the targets.

    A later block's targets and edges are a prefix of an earlier one's, and CSR entries are in
    (target, source) order, so its matrix entries are a prefix of the earlier block's: one entries
    tensor of the first block serves every layer (`entries[:block.num_entries]`)."""
    blocks = []
    for layer in range(1, graph.num_hops + 1):
        targets, sources, edges = graph.block(layer, graph.num_hops)
        blocks.append(CSRGraph(graph.edge_index[:, :edges], targets, sources))
    return graph.with_aux(blocks=tuple(blocks))
