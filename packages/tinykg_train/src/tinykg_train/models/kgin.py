"""KGIN (Wang et al., WWW 2021): user intents over KG relations, relational path-aware aggregation.

Per hop (full graph, `n_layers` hops):
- entities: `e_h <- mean over (h, r, t) of e_r * e_t` (KG edges and their inverses, no users);
- users: `e_u <- m_u * (sum_p beta(u, p) e_p) + m_u`, with `m_u` the mean of the user's items,
  intent `e_p = sum_r alpha(r, p) e_r` (softmax over relations) and `beta(u, p)` a softmax over
  intents of `<e_u, q_p>` with a learned query `q_p` per intent (as the original code does);
then message dropout and L2 normalisation; the final vectors are the sums over hops (hop 0 included).
Training also drops a share of the KG and interaction edges each step (`edge_dropout`, the original
"node dropout"), and adds an independence penalty between intents (`independence`: "distance"
correlation, the original default, or "cosine") weighted by `independence_weight`.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from tinykg_train.compress import ops
from tinykg_train.errors import ConfigError
from tinykg_train.model_defaults import extra_defaults
from tinykg_train.models.base import EmbeddingRecommender
from tinykg_train.models.graphs import ckg_edges, item_to_user_mean, kg_only
from tinykg_train.models.layers import RelationalPathLayer, xavier_parameter
from tinykg_train.models.sparse import CSRGraph


def distance_correlation(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Distance correlation of two 1-d samples (Szekely et al. 2007); 0 iff independent."""

    def centered_distances(x: torch.Tensor) -> torch.Tensor:
        d = ((x[:, None] - x[None, :]).pow(2) + eps).sqrt()
        return d - d.mean(dim=0, keepdim=True) - d.mean(dim=1, keepdim=True) + d.mean()

    A, B = centered_distances(a), centered_distances(b)
    n2 = a.shape[0] ** 2
    dcov_ab = ((A * B).sum() / n2).clamp(min=0).add(eps).sqrt()
    dcov_aa = ((A * A).sum() / n2).clamp(min=0).add(eps).sqrt()
    dcov_bb = ((B * B).sum() / n2).clamp(min=0).add(eps).sqrt()
    return dcov_ab / (dcov_aa * dcov_bb + eps).sqrt()


def intent_independence(weights: torch.Tensor, kind: str) -> torch.Tensor:
    """Sum over intent pairs of their dependence (rows of `weights`: intents over relations)."""
    if kind == "cosine":
        normed = F.normalize(weights, dim=1)
        similarity = normed @ normed.T
        return similarity.triu(diagonal=1).pow(2).sum()
    pairs = itertools.combinations(range(weights.shape[0]), 2)
    return sum(distance_correlation(weights[i], weights[j]) for i, j in pairs)


class KGIN(EmbeddingRecommender):
    """Knowledge Graph-based Intent Network; knobs in `config.extra`: `independence`,
    `independence_weight`, `edge_dropout`."""

    EXTRA_DEFAULTS = extra_defaults("kgin")  # types and allowed values: model_defaults.KNOBS

    def __init__(self, dataset, config) -> None:
        super().__init__(dataset, config)
        if dataset.n_relations < 1:
            raise ConfigError("KGIN needs a dataset with KG triples (its intents mix KG relations)")
        kg = kg_only(ckg_edges(dataset))
        interactions = item_to_user_mean(dataset)
        dim, n_relations = self.embed_dim, 2 * int(dataset.n_relations)  # KG relations + inverses

        self.user_embedding = xavier_parameter(self.n_users, dim)
        self.entity_embedding = xavier_parameter(self.n_entities, dim)
        self.relation_embedding = xavier_parameter(n_relations, dim)
        self.intent_query = xavier_parameter(int(config.n_intents), dim)
        self.intent_relation_logits = xavier_parameter(int(config.n_intents), n_relations)

        self.layers = nn.ModuleList(
            RelationalPathLayer(self.n_users, self.dropout, self.compression)
            for _ in range(config.n_layers)
        )
        # Graph tensors are derived from the dataset: rebuilt, never checkpointed.
        self.register_buffer("kg_edge_index", kg.edge_index, persistent=False)
        self.register_buffer("kg_relation", kg.relation, persistent=False)
        self.ui_graph = CSRGraph(interactions.edge_index, self.n_users, self.n_entities)
        self.register_buffer(
            "ui_weight", self.ui_graph.values(interactions.weight), persistent=False
        )

    # -- propagation -------------------------------------------------------------------------------

    def kg_edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The KG edges of this step: a random `1 - edge_dropout` share of them while training."""
        rate = self.extra["edge_dropout"]
        if not self.training or rate == 0:
            return self.kg_edge_index, self.kg_relation
        n = self.kg_relation.shape[0]
        keep = torch.randperm(n, device=self.kg_relation.device)[: int(n * (1 - rate))]
        return self.kg_edge_index[:, keep], self.kg_relation[keep]

    def interaction_weights(self) -> torch.Tensor:
        """Item -> user weights of this step: dropped at `edge_dropout`, survivors scaled to match."""
        rate = self.extra["edge_dropout"]
        if not self.training or rate == 0:
            return self.ui_weight
        keep = torch.rand(self.ui_weight.shape, device=self.ui_weight.device) >= rate
        return self.ui_weight * keep / (1 - rate)

    def intents(self) -> torch.Tensor:
        """Intent vectors `[n_intents, dim]`: attentive combinations of relation embeddings."""
        return F.softmax(self.intent_relation_logits, dim=-1) @ self.relation_embedding

    def propagate(self) -> tuple[torch.Tensor, torch.Tensor]:
        graph = (*self.kg_edges(), self.ui_graph, self.interaction_weights())
        intents = self.intents()
        user, entity = self.user_embedding, self.entity_embedding
        user_sum, entity_sum = user, entity
        for layer in self.layers:
            user, entity = layer(
                user, entity, self.intent_query, intents, self.relation_embedding, graph
            )
            user_sum, entity_sum = user_sum + user, entity_sum + entity
        return user_sum, entity_sum[: self.n_items]

    def ego_embeddings(self, users, pos_items, neg_items) -> list[torch.Tensor]:
        items = self.entity_embedding.index_select(0, torch.cat([pos_items, neg_items]))
        return [self.user_embedding.index_select(0, users), *items.chunk(2)]

    def extra_loss(self) -> torch.Tensor | None:
        weight = self.extra["independence_weight"]
        if weight == 0 or self.intent_relation_logits.shape[0] < 2:
            return None
        kind = self.extra["independence"]
        # a few hundred floats in, dozens of [relations, relations] intermediates: recomputed in
        # backward rather than stored (quantized) for it
        penalty = ops.recomputed(
            lambda logits: intent_independence(logits, kind),
            self.intent_relation_logits,
            config=self.compression,
        )
        return weight * penalty
