"""LightGCN (He et al., SIGIR 2020): linear propagation on the user-item graph, mean over layers."""

from __future__ import annotations

import torch
from torch import nn

from tinykg_train.models.base import EmbeddingRecommender
from tinykg_train.models.graphs import user_item_graph
from tinykg_train.models.layers import LinearPropagation
from tinykg_train.models.sparse import CSRGraph


class LightGCN(EmbeddingRecommender):
    """`n_layers` rounds of `e <- A_hat e` (A_hat = D^-1/2 A D^-1/2), final = mean of all rounds.

    Uses the train interactions only (no KG); nodes are items then users (`n_items + u`).
    """

    def __init__(self, dataset, config) -> None:
        super().__init__(dataset, config)
        self.layers = nn.ModuleList(LinearPropagation() for _ in range(config.n_layers))
        graph = user_item_graph(dataset)
        self.num_nodes = graph.num_nodes
        self.embedding = nn.Parameter(torch.empty(self.num_nodes, self.embed_dim))
        nn.init.normal_(self.embedding, std=0.1)
        self.graph = CSRGraph(graph.edge_index, self.num_nodes)
        self.register_buffer("adjacency", self.graph.values(graph.weight), persistent=False)

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
