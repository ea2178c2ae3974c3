"""LightGCN (He et al., SIGIR 2020): linear propagation on the user-item graph, mean over layers.

Sampled training (`local_loss`) propagates over a step's sampled user-item subgraph, trimmed per
layer; an edge `t -> h` weighs `1 / sqrt(d_h d_t)` with the global degrees, times `d_h / s_h` (`s_h`
the neighbors sampled for `h`), so each sampled sum is an unbiased estimate of the full one.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from tinykg_train.models.base import EmbeddingRecommender
from tinykg_train.models.graphs import INTERACT, INTERACTED_BY, user_item_graph
from tinykg_train.models.layers import LinearPropagation
from tinykg_train.models.rows import Rows
from tinykg_train.models.sparse import CSRGraph


def local_lightgcn(graph, n_items: int, n_entities: int, degree: torch.Tensor):
    """`graph` (on the CKG's ids) with `aux["ids"]`, its nodes in LightGCN's numbering, and
    `aux["blocks"]`: per layer its `CSRGraph` and the entries of the rescaled weights."""
    from tinykg_train.scale.subgraphs import layer_blocks

    node = graph.node
    ids = torch.where(node >= n_entities, node - n_entities + n_items, node)
    source, target = ids[graph.edge_index[0]], ids[graph.edge_index[1]]
    sampled = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes).to(degree.dtype)
    weight = (degree[source] * degree[target]).rsqrt() * (
        degree[target] / sampled[graph.edge_index[1]]
    )
    blocks = layer_blocks(graph).aux["blocks"]
    # every block's entries are a prefix of the first block's (`scale.subgraphs.layer_blocks`)
    entries = blocks[0].values(weight)
    return graph.with_aux(ids=ids, blocks=blocks, entries=entries)


class LightGCN(EmbeddingRecommender):
    """`n_layers` rounds of `e <- A_hat e` (A_hat = D^-1/2 A D^-1/2), final = mean of all rounds.

    Uses the train interactions only (no KG); nodes are items then users (`n_items + u`).
    """

    follows_kg = False
    embedding_tables = ("embedding",)
    saves_through_ops = True  # every save an op of compress.ops: no hooks in its steps

    def __init__(self, dataset, config) -> None:
        super().__init__(dataset, config)
        self.layers = nn.ModuleList(LinearPropagation() for _ in range(config.n_layers))
        graph = user_item_graph(dataset)
        self.num_nodes = graph.num_nodes
        self.embedding = nn.Parameter(torch.empty(self.num_nodes, self.embed_dim))
        nn.init.normal_(self.embedding, std=0.1)
        self.graph = CSRGraph(graph.edge_index, self.num_nodes)
        self.register_buffer("adjacency", self.graph.values(graph.weight), persistent=False)
        # the degrees behind the weights (sampled training rescales them)
        degree = torch.bincount(graph.edge_index[1].long(), minlength=self.num_nodes)
        self.register_buffer("degree", degree.to(torch.float32).clamp(min=1), persistent=False)

    def on_whole_graph_training(self) -> None:
        """The graph's edge -> entry map served the adjacency's entries only (one index word
        per edge: 38 MiB for 5M interactions)."""
        self.graph.forget_edges()

    def propagate(self) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embedding
        total = x
        for layer in self.layers:
            x = layer(x, self.graph, self.adjacency)
            total = total + x
        final = total / (len(self.layers) + 1)
        return final[self.n_items :], final[: self.n_items]

    def ego_embeddings(self, users, pos_items, neg_items) -> list[torch.Tensor]:
        nodes = torch.cat([users + self.n_items, pos_items, neg_items])
        return list(self.embedding.index_select(0, nodes).chunk(3))

    # -- propagation on a sampled subgraph ---------------------------------------------------------

    def step_sampler(self, ckg, fanouts):
        from tinykg_train.scale.subgraphs import NeighborStepSampler

        prepare = partial(
            local_lightgcn,
            n_items=self.n_items,
            n_entities=self.n_entities,
            degree=self.degree.detach().cpu(),
        )
        return NeighborStepSampler(
            ckg, fanouts, relations=[INTERACT, INTERACTED_BY], prepare=prepare
        )

    def rows_needed(self, users, pos_items, neg_items, graph) -> dict[str, torch.Tensor]:
        return {"embedding": torch.sort(graph.aux["ids"]).values}

    def local_propagate(self, graph, rows: Rows):
        x = rows("embedding", graph.aux["ids"])
        seeds = graph.num_seeds
        total = x[:seeds]
        blocks, entries = graph.aux["blocks"], graph.aux["entries"]
        for layer, block in zip(self.layers, blocks, strict=True):
            x = layer(x[: block.num_sources], block, entries[: block.num_entries])
            total = total + x[:seeds]
        final = total / (len(self.layers) + 1)
        return final, final, graph.batch

    def local_ego(self, users, pos_items, neg_items, rows: Rows) -> list[torch.Tensor]:
        nodes = torch.cat([users + self.n_items, pos_items, neg_items])
        return list(rows("embedding", nodes).chunk(3))
