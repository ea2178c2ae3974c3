"""Multi-hop neighbor sampling on the collaborative KG, vectorized with numpy.

Hop `i` expands the nodes first reached at hop `i-1` (the seeds for hop 0) by drawing up to
`fanouts[i]` of their CSR neighbors each, uniformly, without replacement by default. Every node is
expanded at most once, so it gets at most its hop's fanout. Nodes are numbered locally: the seeds
keep positions `0..S-1`, then come the nodes new at hop 0, then those new at hop 1, ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from kg_data.csr import TAKE_ALL, sample_rows, segment_ids, segment_offsets
from kg_data.errors import KGDataError
from kg_data.graph import CKG

ALL = -1  # a fanout of -1 takes every neighbor


@dataclass(frozen=True)
class SampledSubgraph:
    """The sampled computation graph of a batch of seed nodes (numpy arrays, or torch after `to_torch`).

    - `node` [N]: global CKG node ids; the seeds come first, in the order given.
    - `edge_index` [2, E]: local positions into `node`; row 0 the neighbor `t` (message source), row 1
      the node `h` it updates (message target), PyG's source -> target convention.
    - `relation` [E]: CKG relation id of each edge `(h, relation, t)`; `edge_id` [E]: its CSR position.
    - `hop` [E]: the hop that drew the edge (0 = edges into the seeds).
    - `num_sampled_nodes` / `num_sampled_edges`: per hop counts (nodes: seeds first, then each hop's new ones).
    """

    node: Any
    edge_index: Any
    relation: Any
    edge_id: Any
    hop: Any
    num_seeds: int
    num_sampled_nodes: tuple[int, ...]
    num_sampled_edges: tuple[int, ...]

    @property
    def num_nodes(self) -> int:
        return len(self.node)

    @property
    def num_edges(self) -> int:
        return self.edge_index.shape[1]

    def to_torch(self) -> SampledSubgraph:
        """The same subgraph with every array as a torch int64 tensor (no copy)."""
        import torch

        arrays = {
            f.name: torch.from_numpy(np.ascontiguousarray(getattr(self, f.name)))
            for f in fields(self)
            if isinstance(getattr(self, f.name), np.ndarray)
        }
        return replace(self, **arrays)

    def to_pyg(self) -> Any:
        """A `torch_geometric.data.Data` in NeighborLoader's layout (`n_id`, `e_id`, `batch_size`, `edge_type`)."""
        from torch_geometric.data import Data

        t = self.to_torch() if isinstance(self.node, np.ndarray) else self
        return Data(
            edge_index=t.edge_index,
            edge_type=t.relation,
            n_id=t.node,
            e_id=t.edge_id,
            edge_hop=t.hop,
            num_nodes=self.num_nodes,
            batch_size=self.num_seeds,
            num_sampled_nodes=list(self.num_sampled_nodes),
            num_sampled_edges=list(self.num_sampled_edges),
        )


class NeighborSampler:
    """Fanout sampler over a `CKG`: `NeighborSampler(ckg, [10, 10]).sample(seed_nodes)`.

    `relations` switches to per relation type: a list of relation ids gives every listed relation its
    own `fanouts[i]` draws per node (unlisted relations are not followed); a mapping
    `{relation: fanouts}` gives each relation its own per-hop fanouts (an int means the same at every hop).
    Not thread-safe: one sampler keeps a reusable node-id map; give each thread its own.
    """

    def __init__(
        self,
        ckg: CKG,
        fanouts: Sequence[int] = (10, 10),
        replace: bool = False,
        seed: int = 0,
        relations: Sequence[int] | Mapping[int, int | Sequence[int]] | None = None,
    ) -> None:
        self.ckg = ckg
        self.fanouts = _check_fanouts(fanouts, "fanouts")
        self.replace = bool(replace)
        self.rng = np.random.default_rng(seed)
        self._table = (
            None
            if relations is None
            else _relation_table(relations, self.fanouts, ckg.num_relations)
        )
        if self._table is not None:
            self._segments = _relation_segments(ckg)
        self._local = np.full(ckg.num_nodes, -1, dtype=np.int64)

    def sample(
        self, seed_nodes: Sequence[int] | np.ndarray, rng: np.random.Generator | None = None
    ) -> SampledSubgraph:
        """Sample the `len(fanouts)`-hop neighborhood of distinct `seed_nodes` (global CKG node ids)."""
        seeds = self.check_seeds(seed_nodes)
        rng = self.rng if rng is None else rng
        local = self._local
        nodes, edge_parts, n_edges = [seeds], [], []
        local[seeds] = np.arange(len(seeds))
        try:
            frontier, count = seeds, len(seeds)
            for hop in range(len(self.fanouts)):
                which, positions = self._draw(frontier, hop, rng)
                targets = local[frontier[which]]
                neighbors = self.ckg.indices[positions]
                fresh = _first_seen(neighbors[local[neighbors] < 0], local)
                local[fresh] = np.arange(count, count + len(fresh))
                count += len(fresh)
                nodes.append(fresh)
                edge_parts.append((local[neighbors], targets, positions))
                n_edges.append(len(positions))
                frontier = fresh
        finally:
            for part in nodes:
                local[part] = -1
        sources, targets, positions = (
            np.concatenate(column) for column in zip(*edge_parts, strict=True)
        )
        return SampledSubgraph(
            node=np.concatenate(nodes),
            edge_index=np.stack([sources, targets]),
            relation=self.ckg.relation[positions].astype(np.int64, copy=False),
            edge_id=positions,
            hop=np.repeat(np.arange(len(n_edges), dtype=np.int64), n_edges),
            num_seeds=len(seeds),
            num_sampled_nodes=tuple(len(part) for part in nodes),
            num_sampled_edges=tuple(n_edges),
        )

    def _draw(
        self, frontier: np.ndarray, hop: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """(index into `frontier`, CSR position) of every edge drawn at `hop`."""
        indptr = self.ckg.indptr
        if self._table is None:
            starts = indptr[frontier]
            k = TAKE_ALL if self.fanouts[hop] == ALL else self.fanouts[hop]
            return sample_rows(starts, indptr[frontier + 1] - starts, k, rng, replace=self.replace)
        seg_ptr, seg_start, seg_rel = self._segments
        first = seg_ptr[frontier]
        counts = seg_ptr[frontier + 1] - first
        owner = segment_ids(counts)
        segs = first[owner] + segment_offsets(counts)
        k = self._table[seg_rel[segs], hop]
        keep = k != 0
        owner, segs, k = owner[keep], segs[keep], k[keep]
        k = np.where(k == ALL, TAKE_ALL, k)
        which, positions = sample_rows(
            seg_start[segs], seg_start[segs + 1] - seg_start[segs], k, rng, replace=self.replace
        )
        return owner[which], positions

    def check_seeds(self, seed_nodes: Sequence[int] | np.ndarray) -> np.ndarray:
        seeds = np.asarray(seed_nodes)
        if seeds.ndim != 1 or (seeds.size and not np.issubdtype(seeds.dtype, np.integer)):
            raise KGDataError(
                f"'seed_nodes' needs to be a 1-D array of integer node ids (got shape {seeds.shape}, dtype {seeds.dtype})"
            )
        seeds = seeds.astype(np.int64, copy=False)
        if seeds.size and (seeds.min() < 0 or seeds.max() >= self.ckg.num_nodes):
            bad = seeds[(seeds < 0) | (seeds >= self.ckg.num_nodes)][0]
            raise KGDataError(f"seed node {bad} is outside the graph's 0..{self.ckg.num_nodes - 1}")
        if len(np.unique(seeds)) != len(seeds):
            raise KGDataError("'seed_nodes' holds duplicates; pass each seed node once (np.unique)")
        return seeds


def _first_seen(candidates: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """The distinct values of `candidates` (all with `scratch[v] == -1`), without sorting.

    Writes each value's index into `scratch`, keeps the index that stuck, then restores -1.
    """
    order = np.arange(len(candidates), dtype=np.int64)
    scratch[candidates] = order
    distinct = candidates[scratch[candidates] == order]
    scratch[candidates] = -1
    return distinct


def _check_fanouts(fanouts: Sequence[int], name: str) -> tuple[int, ...]:
    values = tuple(fanouts) if isinstance(fanouts, Sequence) else None
    if not values or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and (v > 0 or v == ALL)
        for v in values
    ):
        raise KGDataError(
            f"'{name}' needs to be a non-empty list of positive integers or -1 (got {fanouts!r})"
        )
    return tuple(int(v) for v in values)


def _relation_table(
    relations: Sequence[int] | Mapping[int, int | Sequence[int]],
    fanouts: tuple[int, ...],
    num_relations: int,
) -> np.ndarray:
    """[num_relations, hops] fanout per relation and hop (0 = relation not followed)."""
    table = np.zeros((num_relations, len(fanouts)), dtype=np.int64)
    items = (
        relations.items() if isinstance(relations, Mapping) else ((r, fanouts) for r in relations)
    )
    for relation, per_hop in items:
        if not isinstance(relation, (int, np.integer)) or not 0 <= relation < num_relations:
            raise KGDataError(
                f"relation {relation!r} in 'relations' is not a relation id 0..{num_relations - 1}"
            )
        per_hop = (per_hop,) * len(fanouts) if isinstance(per_hop, (int, np.integer)) else per_hop
        values = _check_fanouts(per_hop, f"relations[{relation}]")
        if len(values) != len(fanouts):
            raise KGDataError(
                f"'relations[{relation}]' gives {len(values)} fanouts for {len(fanouts)} hops"
            )
        table[relation] = values
    return table


def _relation_segments(ckg: CKG) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split every CSR row into runs of one relation (rows are sorted by relation).

    Returns (`seg_ptr` [num_nodes+1] into the segments, `seg_start` [S+1] CSR start of each segment
    with a closing sentinel, `seg_rel` [S] the relation of each segment).
    """
    n_edges = ckg.num_edges
    row_start = np.zeros(n_edges, dtype=bool)
    row_start[ckg.indptr[:-1][ckg.degree > 0]] = True
    change = np.ones(n_edges, dtype=bool)
    change[1:] = (ckg.relation[1:] != ckg.relation[:-1]) | row_start[1:]
    starts = np.flatnonzero(change)
    seg_ptr = np.searchsorted(starts, ckg.indptr)
    return seg_ptr, np.append(starts, n_edges), ckg.relation[starts]
