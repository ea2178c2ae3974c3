"""KGCN (Wang et al., WWW 2019): user-specific attention over a fixed-size sampled KG neighborhood.

Every entity keeps `kg_neighbors` sampled KG neighbors (`kg_data.graph.kg_neighbor_table`). An
item's vector for user u comes from `n_layers` rounds of the sum aggregator over its receptive field
(the neighbors of its neighbors ...): `act(W (e_v + sum_k pi_u(r_k) e_k) + b)`, where
`pi_u(r) = softmax_k(mean(u * e_r))` weighs a neighbor by how much user u cares about the relation
linking it; ReLU inside, tanh at the last round. Score = `<u, v_u>`, trained with BPR.

Training computes each (user, item) pair's receptive field as a tree (`[B, K^hop, dim]`, as the
original). Scoring all items for a user instead computes each round once per distinct entity that
some item's field needs (`ScoringPlan`), chunked over users so memory stays bounded.

Sampled training (`local_loss`) draws each step's trees afresh from the KG (`fanouts[h]` neighbors
per node at depth h, `scale.receptive_field`) instead of reading the fixed table; scoring keeps
reading the table (`kg_neighbors` per entity).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from kg_data import kg_neighbor_table
from tinykg_train.compress import ops
from tinykg_train.errors import ConfigError
from tinykg_train.models.base import Recommender
from tinykg_train.models.layers import SumAggregator, xavier_parameter
from tinykg_train.models.losses import bpr_loss, l2_penalty
from tinykg_train.models.rows import Rows

#: Elements of the largest temporary tensor `score_users` builds per user chunk (~256 MB in fp32).
SCORING_BUDGET = 1 << 26


@dataclass(frozen=True)
class ScoringPlan:
    """Entities each aggregation round must produce when scoring every item.

    `nodes[l]` are the entities at distance <= l from some item (`nodes[0]` = all items), sorted;
    `self_index[l]` / `neighbor_index[l]` locate `nodes[l]` and their neighbors inside `nodes[l+1]`.
    Round `i` (1-based) outputs vectors for `nodes[n_hops - i]` from those of `nodes[n_hops - i + 1]`.
    """

    nodes: list[torch.Tensor]
    self_index: list[torch.Tensor]
    neighbor_index: list[torch.Tensor]

    @classmethod
    def build(cls, neighbors: torch.Tensor, n_items: int, n_hops: int) -> ScoringPlan:
        nodes = [torch.arange(n_items, device=neighbors.device)]
        for _ in range(n_hops):
            nodes.append(torch.unique(torch.cat([nodes[-1], neighbors[nodes[-1]].reshape(-1)])))
        position = torch.empty(neighbors.shape[0], dtype=torch.long, device=neighbors.device)
        self_index, neighbor_index = [], []
        for level in range(n_hops):
            outer = nodes[level + 1]
            position[outer] = torch.arange(len(outer), device=neighbors.device)
            self_index.append(position[nodes[level]])
            neighbor_index.append(position[neighbors[nodes[level]]])
        return cls(nodes, self_index, neighbor_index)


class KGCN(Recommender):
    """Knowledge Graph Convolutional Network with the sum aggregator."""

    embedding_tables = ("user_embedding", "entity_embedding")
    saves_through_ops = True  # every save an op of compress.ops: no hooks in its steps

    def __init__(self, dataset, config) -> None:
        super().__init__(dataset, config)
        if config.n_layers < 1:
            raise ConfigError(f"KGCN needs 'n_layers' >= 1 hops (got {config.n_layers})")
        self.n_hops, self.n_neighbors = int(config.n_layers), int(config.kg_neighbors)
        neighbors, relations = kg_neighbor_table(dataset, self.n_neighbors, config.seed)
        dim = self.embed_dim
        self.user_embedding = xavier_parameter(self.n_users, dim)
        self.entity_embedding = xavier_parameter(self.n_entities, dim)
        self.relation_embedding = xavier_parameter(max(int(dataset.n_relations), 1), dim)
        self.aggregators = nn.ModuleList(
            SumAggregator(dim, self.dropout, i == self.n_hops - 1, self.compression)
            for i in range(self.n_hops)
        )
        self.register_buffer("neighbors", torch.from_numpy(neighbors), persistent=False)
        self.register_buffer("neighbor_relations", torch.from_numpy(relations), persistent=False)
        self._plan: ScoringPlan | None = None

    # -- the per-pair receptive field (training) ---------------------------------------------------

    def relation_scores(self, user_vectors: torch.Tensor) -> torch.Tensor:
        """`mean(u * e_r)` for every relation: `[len(users), n_relations]`."""
        scores = ops.linear(user_vectors, self.relation_embedding, config=self.compression)
        return scores / self.embed_dim

    def tree_from_table(self, items: torch.Tensor) -> tuple[list, list]:
        """The items' receptive fields read from the fixed table: `(entities, relations)` per
        depth, as `scale.receptive_field.ReceptiveField` holds them."""
        batch = len(items)
        entities, relations = [items.unsqueeze(1)], []
        for _ in range(self.n_hops):
            relations.append(self.neighbor_relations[entities[-1]].reshape(batch, -1))
            entities.append(self.neighbors[entities[-1]].reshape(batch, -1))
        return entities, relations

    def item_vectors(self, scores: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Item vectors `[B, dim]` specific to the user of each pair: `scores[j]` are the
        `relation_scores` of pair j's user, `items[j]` its item."""
        entities, relations = self.tree_from_table(items)
        return self.aggregate_tree(
            scores,
            entities,
            relations,
            (self.n_neighbors,) * self.n_hops,
            lambda e: ops.embedding(self.entity_embedding, e, config=self.compression),
        )

    def aggregate_tree(self, scores, entities, relations, fanouts, entity_rows):
        """The sum aggregator's rounds over trees (`tree_from_table`'s layout, `fanouts[h]`
        children per depth-h node) with each tree's user's `relation_scores`; `entity_rows(ids)`
        gives the entity vectors `ids.shape + (dim,)`."""
        batch = scores.shape[0]
        gathered = (
            ops.gather(scores, 1, relation, config=self.compression) for relation in relations
        )
        weights = [
            ops.softmax(relation_scores.view(batch, -1, k), -1, config=self.compression)
            for relation_scores, k in zip(gathered, fanouts, strict=True)
        ]
        vectors = [entity_rows(e) for e in entities]
        for round_index in range(self.n_hops):
            vectors = [
                self.aggregators[round_index](
                    vectors[hop],
                    vectors[hop + 1].view(batch, -1, fanouts[hop], self.embed_dim),
                    weights[hop],
                )
                for hop in range(self.n_hops - round_index)
            ]
        return vectors[0].view(batch, self.embed_dim)

    def loss(self, users: torch.Tensor, pos_items: torch.Tensor, neg_items: torch.Tensor):
        config = self.compression
        user_vectors = ops.embedding(self.user_embedding, users, config=config)
        # scored once per user, then repeated for the negatives: the linear saves the table rows
        # (their indices), not a quantized copy of repeated rows
        scores = self.relation_scores(user_vectors).repeat(2, 1)
        items = self.item_vectors(scores, torch.cat([pos_items, neg_items]))
        pos, neg = items.chunk(2)
        loss = bpr_loss(user_vectors, pos, neg, config=config)
        if self.l2 > 0:
            item_ego = self.entity_embedding.index_select(0, torch.cat([pos_items, neg_items]))
            ego = [self.user_embedding.index_select(0, users), *item_ego.chunk(2)]
            loss = loss + self.l2 * l2_penalty(ego, config=self.compression)
        return loss

    # -- a step's trees drawn afresh (sampled training) --------------------------------------------

    def step_sampler(self, ckg, fanouts):
        from tinykg_train.scale.receptive_field import ReceptiveFieldSampler

        return ReceptiveFieldSampler(ckg, fanouts)

    def rows_needed(self, users, pos_items, neg_items, field) -> dict[str, torch.Tensor]:
        entities = torch.cat([e.reshape(-1) for e in field.entities])
        return {"user_embedding": torch.unique(users), "entity_embedding": torch.unique(entities)}

    def local_loss(self, users, pos_items, neg_items, field, rows: Rows | None = None):
        """`loss` over the step's own trees (`field`, a `ReceptiveField`), tables read via `rows`."""
        rows = self.parameter_rows() if rows is None else rows
        dim = self.embed_dim

        def entity_rows(ids: torch.Tensor) -> torch.Tensor:
            return rows("entity_embedding", ids.reshape(-1)).view(*ids.shape, dim)

        user_vectors = rows("user_embedding", users)
        items = self.aggregate_tree(
            self.relation_scores(user_vectors).repeat(2, 1),
            field.entities,
            field.relations,
            field.fanouts,
            entity_rows,
        )
        pos, neg = items.chunk(2)
        loss = bpr_loss(user_vectors, pos, neg, config=self.compression)
        if self.l2 > 0:
            item_ego = rows("entity_embedding", torch.cat([pos_items, neg_items]))
            ego = [rows("user_embedding", users), *item_ego.chunk(2)]
            loss = loss + self.l2 * l2_penalty(ego, config=self.compression)
        return loss

    # -- scoring every item ------------------------------------------------------------------------

    def scoring_plan(self) -> ScoringPlan:
        if self._plan is None or self._plan.nodes[0].device != self.neighbors.device:
            self._plan = ScoringPlan.build(self.neighbors, self.n_items, self.n_hops)
        return self._plan

    @torch.no_grad()
    def score_users(self, users: torch.Tensor) -> torch.Tensor:
        """`[len(users), n_items]`: each round computed once per needed entity, per user chunk."""
        plan = self.scoring_plan()
        users = users.to(self.neighbors.device)
        # Per user: [S, dim] in the first round, [S, K, dim] gathers in the later ones.
        fan = self.n_neighbors if self.n_hops > 1 else 1
        widest = max(len(n) for n in plan.nodes) * self.embed_dim * fan
        chunk = max(1, SCORING_BUDGET // widest)
        with self.evaluating():
            return torch.cat([self.score_chunk(part, plan) for part in users.split(chunk)])

    def score_chunk(self, users: torch.Tensor, plan: ScoringPlan) -> torch.Tensor:
        user_vectors = self.user_embedding[users]
        scores = self.relation_scores(user_vectors)  # [C, R]
        level = self.n_hops - 1
        # Round 1 reads the raw, user-independent embeddings: project them once (W(a+b) = Wa + Wb).
        first = self.aggregators[0]
        projected = self.entity_embedding[plan.nodes[level + 1]] @ first.linear.weight.T
        weights = self.level_weights(scores, plan, level)  # [C, S, K]
        mixed = torch.einsum("csk,skd->csd", weights, projected[plan.neighbor_index[level]])
        mixed += projected[plan.self_index[level]] + first.linear.bias
        vectors = mixed.tanh_() if first.last else mixed.relu_()  # in place: no grad here
        for round_index in range(1, self.n_hops):
            level = self.n_hops - 1 - round_index
            vectors = self.aggregators[round_index](
                vectors[:, plan.self_index[level]],
                vectors[:, plan.neighbor_index[level]],
                self.level_weights(scores, plan, level),
            )
        return torch.einsum("cd,cid->ci", user_vectors, vectors)

    def level_weights(self, scores: torch.Tensor, plan: ScoringPlan, level: int) -> torch.Tensor:
        """Softmax over each node's K neighbors of the user's relation scores: `[C, S_level, K]`."""
        relations = self.neighbor_relations[plan.nodes[level]]  # [S, K]
        return torch.softmax(scores[:, relations], dim=-1)
