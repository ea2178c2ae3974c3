"""`LocalGraph`: one CF step's sampled subgraph, in the form the models' local path reads.

Built from a `kg_data.SampledSubgraph` (in the sampling thread) whose seeds are the distinct CKG
nodes of a batch's users, positive and negative items. Node ids are the CKG's (docs/INTERFACES.md:
entities first, user `u` at `n_entities + u`); edges are local positions, row 0 the neighbor `t`
(message source), row 1 the node `h` it updates; `edge_id` is each edge's position in the CKG's CSR,
so per-edge global quantities (KGAT's attention) are looked up with it. A model may attach what it
derives from the structure alone (a CSR of the local edges, per-kind numberings) in `aux`, computed
in the sampling thread too, off the step's critical path.

Nodes are ordered by their distance from the seeds (the seeds, then the nodes first reached at hop 0,
at hop 1, ...) and edges by the hop that drew them; the edges into a node are the neighbors drawn for
it, all at the hop equal to its distance. So the nodes within distance `d` are a prefix of `node`,
and the edges into them a prefix of `edge_index` (`num_within`, `edges_within`): layer `k` of an
`L`-layer model needs outputs only for the nodes within distance `L - k`, computed from the edges
into them, whose sources lie within distance `L - k + 1` (`block`). That trim, not a propagation over
the whole subgraph at every layer, is what keeps a sampled step small (PyG's `trim_to_layer`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from kg_data.index_dtype import narrowest_index_dtype
from tinykg_train.errors import TinyKGError


@dataclass(frozen=True)
class LocalGraph:
    """A batch's sampled subgraph (torch int64 tensors); see the module docstring.

    `batch` = local positions `(users, pos_items, neg_items)` of the batch's rows (`users` as CKG
    user nodes), each `[B]`. `aux` holds model-derived structures (tensors or modules) that `to`
    moves along.
    """

    node: torch.Tensor
    edge_index: torch.Tensor
    relation: torch.Tensor
    edge_id: torch.Tensor
    hop: torch.Tensor
    num_seeds: int
    nodes_per_hop: tuple[int, ...]
    edges_per_hop: tuple[int, ...]
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    sorted_node: torch.Tensor
    sorted_position: torch.Tensor
    aux: dict[str, Any] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.node.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def num_hops(self) -> int:
        return len(self.edges_per_hop)

    def num_within(self, distance: int) -> int:
        """How many nodes lie within `distance` hops of the seeds (a prefix of `node`)."""
        return sum(self.nodes_per_hop[: max(distance, -1) + 1])

    def edges_within(self, distance: int) -> int:
        """How many edges point into nodes within `distance` hops (a prefix of `edge_index`)."""
        return sum(self.edges_per_hop[: max(distance, -1) + 1])

    def block(self, layer: int, n_layers: int) -> tuple[int, int, int]:
        """`(targets, sources, edges)` prefix sizes of layer `layer` (1-based) of `n_layers`."""
        distance = n_layers - layer
        return (
            self.num_within(distance),
            self.num_within(distance + 1),
            self.edges_within(distance),
        )

    @classmethod
    def from_sampled(cls, subgraph: Any, batch: tuple[np.ndarray, ...]) -> LocalGraph:
        """From a numpy `SampledSubgraph` and the batch's local positions (numpy arrays). Local
        positions, relations and hops are stored narrow (int32, int8): a step's subgraph can hold
        millions of edges, and a few of them wait in the sampling queue."""
        node = torch.from_numpy(np.ascontiguousarray(subgraph.node, dtype=np.int64))
        order = torch.argsort(node)
        return cls(
            node=node,
            edge_index=_tensor(subgraph.edge_index, narrowest_index_dtype(len(subgraph.node) - 1)),
            relation=_tensor(subgraph.relation, np.int32),
            edge_id=_tensor(
                subgraph.edge_id, narrowest_index_dtype(int(subgraph.edge_id.max(initial=0)))
            ),
            hop=_tensor(subgraph.hop, np.int8),
            num_seeds=int(subgraph.num_seeds),
            nodes_per_hop=tuple(int(n) for n in subgraph.num_sampled_nodes),
            edges_per_hop=tuple(int(n) for n in subgraph.num_sampled_edges),
            batch=tuple(torch.from_numpy(np.ascontiguousarray(b, dtype=np.int64)) for b in batch),
            sorted_node=node[order],
            sorted_position=order,
        )

    def position(self, global_ids: torch.Tensor) -> torch.Tensor:
        """Local positions of CKG node ids (each must be in the subgraph; checked)."""
        global_ids = global_ids.long()
        slot = torch.searchsorted(self.sorted_node, global_ids).clamp_(max=self.num_nodes - 1)
        if global_ids.numel() and not bool((self.sorted_node[slot] == global_ids).all()):
            raise TinyKGError(
                "a node id was looked up that this step's subgraph does not hold; "
                "look up the batch's users and items or the nodes in `node`"
            )
        return self.sorted_position[slot]

    def with_aux(self, **aux: Any) -> LocalGraph:
        """The same graph with more model-derived structures in `aux`."""
        return replace(self, aux={**self.aux, **aux})

    def to(self, device: torch.device | str, non_blocking: bool = False) -> LocalGraph:
        """The same graph on `device` (tensors and modules in `aux` too)."""

        def move(value: Any) -> Any:
            if isinstance(value, tuple):
                return tuple(move(v) for v in value)
            if hasattr(value, "to"):  # tensors, modules, a model's own step structures
                return value.to(device, non_blocking=non_blocking)
            return value

        return LocalGraph(
            node=move(self.node),
            edge_index=move(self.edge_index),
            relation=move(self.relation),
            edge_id=move(self.edge_id),
            hop=move(self.hop),
            num_seeds=self.num_seeds,
            nodes_per_hop=self.nodes_per_hop,
            edges_per_hop=self.edges_per_hop,
            batch=move(self.batch),
            sorted_node=move(self.sorted_node),
            sorted_position=move(self.sorted_position),
            aux={key: move(value) for key, value in self.aux.items()},
        )


def _tensor(array: np.ndarray, dtype: type) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype))
