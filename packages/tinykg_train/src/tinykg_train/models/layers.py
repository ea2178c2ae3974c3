"""Graph layers shared by the models, built from `tinykg_train.compress.ops`.

Each layer is its own module so `ActivationMeter.by_module()` reports the memory of every layer
(`layers.0`, `layers.1`, ...). Graph tensors are owned by the model (as buffers) and passed in.
"""

from __future__ import annotations

import torch
from torch import nn

from tinykg_train.compress import CompressionConfig, ops
from tinykg_train.compress.blocks import block_budget
from tinykg_train.compress.modules import CompressedModule
from tinykg_train.models.relational import relational_mean
from tinykg_train.models.sparse import CSRGraph


def xavier_parameter(*shape: int) -> nn.Parameter:
    """A parameter of the given shape, Xavier-uniform initialised (the KGAT/KGIN choice)."""
    weight = torch.empty(*shape)
    nn.init.xavier_uniform_(weight)
    return nn.Parameter(weight)


def xavier_linear(in_dim: int, out_dim: int) -> nn.Linear:
    linear = nn.Linear(in_dim, out_dim)
    nn.init.xavier_uniform_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


class LinearPropagation(nn.Module):
    """One LightGCN round: `x <- A_hat x` (no weights, no nonlinearity; nothing saved of x)."""

    def forward(self, x, graph: CSRGraph, values: torch.Tensor) -> torch.Tensor:
        return graph(x, values)


class _Propagation:
    """`x -> graph(x, attention)` for backward to recompute the neighbors with (all rows, or
    `rows(x, start, stop)`), refusing to run once the attention changed in place since the forward
    (which would give a wrong gradient)."""

    def __init__(self, graph: CSRGraph, attention: torch.Tensor) -> None:
        self.graph, self.attention, self.version = graph, attention, attention._version

    def _check(self) -> None:
        if self.attention._version != self.version:
            raise RuntimeError(
                "KGAT's attention changed between a forward and its backward (refresh_attention ran "
                "in between): compute the loss again after refreshing the attention"
            )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self._check()
        return self.graph(x, self.attention)

    def rows(self, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        self._check()
        return self.graph.rows(x, self.attention, start, stop)

    def gathered_rows(self, rows_of, start: int, stop: int, positions=None) -> torch.Tensor:
        self._check()
        return self.graph.gathered_rows(rows_of, self.attention, start, stop, positions)

    def add_transposed_rows(
        self, x: torch.Tensor, start: int, stop: int, out: torch.Tensor
    ) -> torch.Tensor:
        self._check()
        return self.graph.add_transposed_rows(x, self.attention, start, stop, out)


#: The mean in-degree from which a KGAT layer stores its neighbor vectors (quantized) instead of
#: recomputing them from the ego vectors in backward. The recompute costs a sparse product (time
#: ~ edges), storing a quantize and a decode (time ~ nodes). Measured on one CPU thread, INT2 CF
#: step / FP32's, recompute against store: lfm1m (degree 48) 1.13 against 1.07, synthetic-small
#: (15) 1.19 against 1.23, ml-100k (10) 1.10 against 1.14, music-kgcn (6) 1.10 against 1.16; the
#: two meet near 26 (docs/compression.md, *Where the time goes on a CPU*).
STORE_NEIGHBORS_MIN_DEGREE = 24


def stores_neighbors(graph: CSRGraph, ego: torch.Tensor, block_bytes: int | None) -> bool:
    """Whether a whole-graph KGAT layer stores its neighbor vectors rather than recomputing them:
    on a dense enough graph (`STORE_NEIGHBORS_MIN_DEGREE`), and only where the backward would
    recompute them whole anyway (`[nodes, width]` of `ego`'s dtype within one block's budget), so
    a stored copy never raises the backward's peak above the recompute's."""
    degree = graph.num_entries / max(graph.num_nodes, 1)
    whole_bytes = graph.num_nodes * ego.shape[-1] * ego.element_size()
    return degree >= STORE_NEIGHBORS_MIN_DEGREE and whole_bytes <= block_budget(block_bytes)


class BiInteractionLayer(CompressedModule):
    """One KGAT layer: attentive propagation, then the bi-interaction aggregator, message dropout.

    `e_N = sum_t pi(h, r, t) e_t`, then `LeakyReLU(W1 (e_h + e_N)) + LeakyReLU(W2 (e_h * e_N))`
    (Wang et al. 2019, eq. 4 and 8). Returns the output and its L2-normalised copy (the part of
    the final representation this layer contributes).
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        dropout: float,
        negative_slope: float,
        compression: CompressionConfig,
    ) -> None:
        super().__init__()
        self.sum_linear = xavier_linear(in_dim, out_dim)
        self.product_linear = xavier_linear(in_dim, out_dim)
        self.dropout = dropout
        self.negative_slope = negative_slope
        self.compression = compression
        self.block_bytes: int | None = None  # backward temporaries at once (compress.blocks)

    def forward(
        self,
        ego,
        graph: CSRGraph,
        attention: torch.Tensor,
        num_targets: int | None = None,
        rows: torch.Tensor | None = None,
        output_saved_next: bool = True,
        normalize: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`attention`: the graph's matrix entries (`graph.values(per-edge attention)`).

        `num_targets` (a sampled step's layer block): `ego` holds the graph's sources, of which the
        first `num_targets` are its targets, and only those get an output; backward recomputes the
        neighbors from the stored sources.

        `rows` (a whole-graph CF step's batch): the normalized copy of only those rows of the
        output (the same values as its rows: normalization is row-wise), so nothing whole-graph
        is saved for it nor made in its backward; with `output_saved_next` (the next layer saves
        the output) the output is offered to that save in the form the whole normalization would
        have stored (`ops.offer_normalized`). `normalize=False`: no normalized copy (None), for a
        caller that normalizes only the rows it keeps (scoring)."""
        c = self.compression
        weights = (
            self.sum_linear.weight,
            self.sum_linear.bias,
            self.product_linear.weight,
            self.product_linear.bias,
            self.negative_slope,
        )
        scoring = num_targets is None and not torch.is_grad_enabled()
        if scoring:  # no gradient: the aggregator a block of rows at a time
            out = ops.bi_interaction_rows(
                ego, _Propagation(graph, attention), *weights, block_bytes=self.block_bytes
            )
        else:
            out = self._trained_aggregate(ego, graph, attention, num_targets, weights)
        out = ops.dropout(out, self.dropout, self.training, config=c)
        if not normalize:
            return out, None
        if rows is None:
            return out, ops.l2_normalize(out, dim=-1, config=c)
        if output_saved_next:
            ops.offer_normalized(out, config=c)
        return out, ops.l2_normalize(out.index_select(0, rows), dim=-1, config=c)

    def _trained_aggregate(self, ego, graph: CSRGraph, attention, num_targets, weights):
        """The aggregator with gradient. Compressed over the whole graph: propagation and
        aggregator in one op, a block of rows at a time (`ops.propagated_bi_interaction`), unless
        the neighbors are worth storing. Else the neighbors once, the compressed op saving only
        what its backward cannot rebuild (`ops.bi_interaction`)."""
        whole = num_targets is None
        stores = whole and stores_neighbors(graph, ego, self.block_bytes)
        if whole and not stores and self.compression.enabled:
            return ops.propagated_bi_interaction(
                ego,
                _Propagation(graph, attention),
                *weights,
                config=self.compression,
                block_bytes=self.block_bytes,
            )
        neighbors = graph(ego, attention)
        sources, neighbors_of = None, _Propagation(graph, attention)
        if num_targets is not None:
            sources, ego = ego, ego[:num_targets]
        elif stores:
            neighbors_of = None
        # neighbors_of None: the neighbors are stored; else recomputed from the stored ego (or
        # sources). The whole-graph neighbors are dropped on return, before the dropout.
        return ops.bi_interaction(
            ego,
            neighbors,
            *weights,
            config=self.compression,
            neighbors_of=neighbors_of,
            block_bytes=self.block_bytes,
            sources=sources,
        )


class RelationalPathLayer(CompressedModule):
    """One KGIN hop (Wang et al. 2021, eq. 6-10), then message dropout and L2 normalisation.

    Entities: `e_h <- mean over (h, r, t) of e_r * e_t` (KG edges only). Users:
    `e_u <- m_u * (sum_p beta(u, p) e_p) + m_u`, with `m_u` the weighted sum of the user's items
    (weights 1/deg(u): a mean), `e_p` the intents (mixes of relation embeddings) and `beta(u, p)`
    a softmax over intents of `<e_u, q_p>`, `q_p` a learned query per intent (the original code's
    `latent_emb`).
    """

    def __init__(self, n_users: int, dropout: float, compression: CompressionConfig) -> None:
        super().__init__()
        self.n_users = n_users
        self.dropout = dropout
        self.compression = compression
        self.block_bytes: int | None = None  # per-edge temporaries at once (compress.blocks)

    def relational_mean(
        self, entity, relation_embedding, edge_index, relation, num_nodes: int | None = None
    ) -> torch.Tensor:
        return relational_mean(
            entity,
            relation_embedding,
            edge_index,
            relation,
            entity.shape[0] if num_nodes is None else num_nodes,
            config=self.compression,
            block_bytes=self.block_bytes,
        )

    def user_update(self, user, entity, queries, intents, ui_graph, ui_values) -> torch.Tensor:
        c = self.compression
        item_mean = ui_graph(entity, ui_values)
        preference = ops.softmax(ops.linear(user, queries, config=c), 1, config=c)  # beta(u, p)
        intent_mix = ops.linear(preference, intents.T, config=c)
        return ops.mul(item_mean, intent_mix, config=c) + item_mean

    def forward(
        self, user, entity, queries, intents, relation_embedding, graph, num_entities=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`graph` = (kg_index, kg_relation, ui_graph, ui_values) of this step.

        `num_entities` (a sampled step's layer block): only the first `num_entities` entities get an
        output; `entity` holds the sources of the KG edges, the user-item graph reads its first
        `ui_graph.num_sources`."""
        c = self.compression
        kg_index, kg_relation, ui_graph, ui_values = graph
        items = entity if num_entities is None else entity[: ui_graph.num_sources]
        user = self.user_update(user, items, queries, intents, ui_graph, ui_values)
        entity = self.relational_mean(
            entity, relation_embedding, kg_index, kg_relation, num_nodes=num_entities
        )
        user = ops.dropout(user, self.dropout, self.training, config=c)
        entity = ops.dropout(entity, self.dropout, self.training, config=c)
        return ops.l2_normalize(user, dim=-1, config=c), ops.l2_normalize(entity, dim=-1, config=c)


class SumAggregator(CompressedModule):
    """KGCN's sum aggregator: `act(W dropout(e_v + sum_k w_k e_k) + b)`; tanh if `last`, else ReLU.

    `self_vectors [..., dim]`, `neighbor_vectors [..., K, dim]`, `weights [..., K]` (softmax over K).
    """

    def __init__(
        self, dim: int, dropout: float, last: bool, compression: CompressionConfig
    ) -> None:
        super().__init__()
        self.linear = xavier_linear(dim, dim)
        self.dropout = dropout
        self.last = last
        self.compression = compression

    def activation(self, x: torch.Tensor) -> torch.Tensor:
        c = self.compression
        return ops.tanh(x, config=c) if self.last else ops.relu(x, config=c)

    def forward(self, self_vectors, neighbor_vectors, weights) -> torch.Tensor:
        c = self.compression
        mixed = ops.mul(weights.unsqueeze(-1), neighbor_vectors, config=c).sum(dim=-2)
        hidden = ops.dropout(self_vectors + mixed, self.dropout, self.training, config=c)
        return self.activation(ops.linear(hidden, self.linear.weight, self.linear.bias, config=c))
