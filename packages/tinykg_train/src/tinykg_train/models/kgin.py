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

Sampled training (`local_loss`) runs the same hops on a step's sampled subgraph (users draw from
their items, entities from their KG neighbors, never an item from its users), trimmed per hop: the
means are over the sampled neighbors, and `edge_dropout` drops a share of the sampled edges.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from tinykg_train.compress import ops
from tinykg_train.errors import ConfigError
from tinykg_train.model_defaults import extra_defaults
from tinykg_train.models.base import EmbeddingRecommender
from tinykg_train.models.graphs import (
    FIRST_KG_RELATION,
    INTERACT,
    ckg_edges,
    compact,
    item_to_user_mean,
    kg_only,
    mean_weights,
)
from tinykg_train.models.layers import RelationalPathLayer, xavier_parameter
from tinykg_train.models.rows import Rows
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
    return pairwise_distance_correlation(weights).triu(diagonal=1).sum()


def pairwise_distance_correlation(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """`[k, k]` distance correlations between the rows of `x` (`[k, n]`): entry (i, j) equals
    `distance_correlation(x[i], x[j])`. Each row's distance matrix is built once and every pair's
    covariance comes from one product, instead of two matrices per pair (4 intents: 4 not 12)."""
    d = ((x[:, :, None] - x[:, None, :]).pow(2) + eps).sqrt()
    centered = d - d.mean(dim=1, keepdim=True) - d.mean(dim=2, keepdim=True)
    centered = centered + d.mean(dim=(1, 2), keepdim=True)
    flat = centered.flatten(1)
    dcov = (flat @ flat.T / x.shape[1] ** 2).clamp(min=0).add(eps).sqrt()
    scale = dcov.diagonal()
    return dcov / (scale[:, None] * scale[None, :] + eps).sqrt()


@dataclass(frozen=True)
class LocalKGIN:
    """A sampled step's graph in KGIN's terms: users and entities numbered apart, in the subgraph's
    node order (so the entities within distance d are a prefix: `entities_within[d]` of them).

    `user_ids` / `entity_ids` global table rows; `kg_index` [2, E] entity positions (source, target)
    of the KG edges, hop-ordered (`kg_within[d]` of them point into entities within distance d),
    `kg_relation` their KG relation ids `0..2R-1`; `ui_graph` item -> user means over the sampled
    items (`ui_values` its entries); `batch` the batch rows' user / item positions.
    """

    user_ids: torch.Tensor
    entity_ids: torch.Tensor
    kg_index: torch.Tensor
    kg_relation: torch.Tensor
    ui_graph: CSRGraph
    ui_values: torch.Tensor
    entities_within: tuple[int, ...]
    kg_within: tuple[int, ...]
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]

    def to(self, device, non_blocking: bool = False) -> LocalKGIN:
        def move(t):
            return t.to(device, non_blocking=non_blocking)

        return LocalKGIN(
            move(self.user_ids),
            move(self.entity_ids),
            move(self.kg_index),
            move(self.kg_relation),
            self.ui_graph.to(device),
            move(self.ui_values),
            self.entities_within,
            self.kg_within,
            tuple(move(b) for b in self.batch),
        )


def local_kgin(graph, n_entities: int):
    """`graph` with `aux["kgin"]`, its `LocalKGIN` (built in the sampling thread)."""
    is_user = graph.node >= n_entities
    n_users = int(is_user.sum())
    slot = torch.empty_like(graph.node)
    slot[is_user] = torch.arange(n_users)
    slot[~is_user] = torch.arange(graph.num_nodes - n_users)
    source, target = slot[graph.edge_index[0]], slot[graph.edge_index[1]]
    ui = graph.relation == INTERACT
    kg = graph.relation >= FIRST_KG_RELATION
    entities_before = torch.cumsum(~is_user, 0)  # entities among the first i + 1 nodes
    kg_hop = graph.hop[kg]
    distances = range(graph.num_hops + 1)
    ui_index = torch.stack([source[ui], target[ui]])
    items_within_reach = int(entities_before[graph.num_within(1) - 1])
    ui_graph = CSRGraph(ui_index, n_users, items_within_reach)
    local = LocalKGIN(
        user_ids=graph.node[is_user] - n_entities,
        entity_ids=graph.node[~is_user],
        kg_index=torch.stack([source[kg], target[kg]]),
        kg_relation=graph.relation[kg] - FIRST_KG_RELATION,
        ui_graph=ui_graph,
        ui_values=ui_graph.values(mean_weights(ui_index[1], n_users)),
        entities_within=tuple(int(entities_before[graph.num_within(d) - 1]) for d in distances),
        kg_within=tuple(int((kg_hop <= d).sum()) for d in distances),
        batch=tuple(slot[b] for b in graph.batch),
    )
    return graph.with_aux(kgin=local)


class KGIN(EmbeddingRecommender):
    """Knowledge Graph-based Intent Network; knobs in `config.extra`: `independence`,
    `independence_weight`, `edge_dropout`."""

    EXTRA_DEFAULTS = extra_defaults("kgin")  # types and allowed values: model_defaults.KNOBS
    embedding_tables = ("user_embedding", "entity_embedding")
    saves_through_ops = True  # every save an op of compress.ops: no hooks in its steps

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
        # Graph tensors are derived from the dataset: rebuilt, never checkpointed. Relation ids are
        # int32 like the edge index (an int64 copy would hold 4 bytes more per KG edge).
        self.register_buffer("kg_edge_index", kg.edge_index, persistent=False)
        self.register_buffer("kg_relation", compact(kg.relation), persistent=False)
        self.ui_graph = CSRGraph(interactions.edge_index, self.n_users, self.n_entities)
        self.register_buffer(
            "ui_weight", self.ui_graph.values(interactions.weight), persistent=False
        )

    def on_whole_graph_training(self) -> None:
        """The user-item graph's edge -> entry map served `ui_weight` only (one index word per
        interaction)."""
        self.ui_graph.forget_edges()

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
        weights = ops.softmax(self.intent_relation_logits, -1, config=self.compression)
        return ops.linear(weights, self.relation_embedding.T, config=self.compression)

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

    # -- propagation on a sampled subgraph ---------------------------------------------------------

    def step_sampler(self, ckg, fanouts):
        from tinykg_train.scale.subgraphs import NeighborStepSampler

        relations = [INTERACT, *range(FIRST_KG_RELATION, ckg.num_relations)]
        prepare = partial(local_kgin, n_entities=self.n_entities)
        return NeighborStepSampler(ckg, fanouts, relations=relations, prepare=prepare)

    def rows_needed(self, users, pos_items, neg_items, graph) -> dict[str, torch.Tensor]:
        local = graph.aux["kgin"]
        return {
            "user_embedding": torch.sort(local.user_ids).values,
            "entity_embedding": torch.sort(local.entity_ids).values,
        }

    def local_edge_dropout(self, local: LocalKGIN) -> tuple[torch.Tensor | None, torch.Tensor]:
        """A keep mask over the sampled KG edges (None: keep all) and the user-item entries of
        this step, dropped at `edge_dropout` as `kg_edges` / `interaction_weights` drop them."""
        rate = self.extra["edge_dropout"]
        if not self.training or rate == 0:
            return None, local.ui_values
        n = local.kg_relation.shape[0]
        keep = torch.zeros(n, dtype=torch.bool, device=local.kg_relation.device)
        keep[torch.randperm(n, device=keep.device)[: int(n * (1 - rate))]] = True
        kept = torch.rand(local.ui_values.shape, device=local.ui_values.device) >= rate
        return keep, local.ui_values * kept / (1 - rate)

    def local_propagate(self, graph, rows: Rows):
        local = graph.aux["kgin"]
        keep, ui_values = self.local_edge_dropout(local)
        intents = self.intents()
        user = rows("user_embedding", local.user_ids)
        entity = rows("entity_embedding", local.entity_ids)
        seeds = local.entities_within[0]
        user_sum, entity_sum = user, entity[:seeds]
        n_layers = len(self.layers)
        for index, layer in enumerate(self.layers, start=1):
            within = n_layers - index  # this hop's outputs: the entities within that distance
            count = local.kg_within[within]
            kg_index, kg_relation = local.kg_index[:, :count], local.kg_relation[:count]
            if keep is not None:
                kg_index, kg_relation = kg_index[:, keep[:count]], kg_relation[keep[:count]]
            user, entity = layer(
                user,
                entity[: local.entities_within[within + 1]],
                self.intent_query,
                intents,
                self.relation_embedding,
                (kg_index, kg_relation, local.ui_graph, ui_values),
                num_entities=local.entities_within[within],
            )
            user_sum, entity_sum = user_sum + user, entity_sum + entity[:seeds]
        return user_sum, entity_sum, local.batch

    def local_ego(self, users, pos_items, neg_items, rows: Rows) -> list[torch.Tensor]:
        items = rows("entity_embedding", torch.cat([pos_items, neg_items]))
        return [rows("user_embedding", users), *items.chunk(2)]

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
