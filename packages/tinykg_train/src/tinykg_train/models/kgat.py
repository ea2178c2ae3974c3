"""KGAT (Wang et al., KDD 2019): attentive embedding propagation over the collaborative KG.

Two phases per epoch, as in the original code:
- KG phase (`kg_loss`): TransR on (h, r, t) against a corrupted triple. Like the original, which
  trains TransR on every CKG triple, each KG batch is joined by its inverse triples and by as many
  sampled user-item triples (relations 0 and 1): every relation the attention uses gets trained.
- CF phase (`loss`): `n_layers` bi-interaction layers over the whole CKG, attention-weighted; the
  L2-normalised layer outputs are concatenated; BPR on the concatenation.
The attention pi(h, r, t) = (W_r e_t)^T tanh(W_r e_h + e_r), softmax over each head's neighbors, is
computed without gradient and kept in a buffer; it is refreshed at each epoch start and before
scoring (the original refreshes it after each epoch's training, then evaluates).

Sampled training (`local_loss`) runs the same layers on a step's sampled subgraph, trimmed per layer
(`LocalGraph.block`); each edge's attention is the global one (looked up by `edge_id`) renormalised
over the node's sampled neighbors, i.e. the softmax over the sampled set.
"""

from __future__ import annotations

import torch
from torch import nn

from tinykg_train.compress import ops
from tinykg_train.compress.ops.edge_softmax import softmax_in_place
from tinykg_train.errors import ConfigError
from tinykg_train.model_defaults import extra_defaults
from tinykg_train.models.base import EmbeddingRecommender
from tinykg_train.models.graphs import (
    FIRST_KG_RELATION,
    INTERACT,
    ckg_edges,
    compact,
    sort_by_relation,
)
from tinykg_train.models.layers import BiInteractionLayer, xavier_parameter
from tinykg_train.models.losses import softplus_mean
from tinykg_train.models.pretrained import load_mf_embeddings
from tinykg_train.models.rows import Rows
from tinykg_train.models.sparse import CSRGraph

#: Floats in each [edges, dim] tensor of the attention refresh (8 MiB): it scores 2^21 / dim edges
#: at a time. With 2^18 edges at a time (64 MiB at 64 dims) the refresh, not the CF step, set the
#: training's peak at every width on lfm1m: 274 MiB against the INT2 CF step's 69; now 47.
ATTENTION_CHUNK_FLOATS = 1 << 21


def default_layer_dims(embed_dim: int, n_layers: int) -> list[int]:
    """The paper's shrinking layers (64 -> 64, 32, 16): halve per layer, at least 8."""
    return [max(embed_dim >> layer, 8) for layer in range(n_layers)]


class KGAT(EmbeddingRecommender):
    """Knowledge Graph Attention Network; knobs in `config.extra`: `layer_dims`, `relation_dim`,
    `negative_slope` (LeakyReLU of the aggregator), `pretrained` (a BPR-MF run dir)."""

    has_kg_phase = True
    EXTRA_DEFAULTS = extra_defaults("kgat")  # pretrained: a BPR-MF run dir to start from
    embedding_tables = ("node_embedding",)
    saves_through_ops = True  # every save an op of compress.ops: no hooks in its steps

    def __init__(self, dataset, config) -> None:
        super().__init__(dataset, config)
        edges = ckg_edges(dataset)
        self.num_nodes = edges.num_nodes
        self.n_kg_relations = int(dataset.n_relations)
        self.num_relations = FIRST_KG_RELATION + 2 * self.n_kg_relations
        dim = self.embed_dim
        relation_dim = int(self.extra["relation_dim"] or dim)
        layer_dims = self.extra["layer_dims"] or default_layer_dims(dim, config.n_layers)
        if len(layer_dims) != config.n_layers or any(int(d) <= 0 for d in layer_dims):
            raise ConfigError(
                f"KGAT 'layer_dims' needs {config.n_layers} positive sizes, one per layer (got {layer_dims!r})"
            )

        self.node_embedding = xavier_parameter(self.num_nodes, dim)
        if self.extra["pretrained"]:
            users, items = load_mf_embeddings(
                self.extra["pretrained"], self.n_users, self.n_items, dim
            )
            with torch.no_grad():
                self.node_embedding[self.n_entities :] = users
                self.node_embedding[: self.n_items] = items
        self.relation_embedding = xavier_parameter(self.num_relations, relation_dim)
        self.transfer = nn.Parameter(torch.empty(self.num_relations, dim, relation_dim))
        for matrix in self.transfer.data:
            nn.init.xavier_uniform_(matrix)
        sizes = [dim, *map(int, layer_dims)]
        self.layers = nn.ModuleList(
            BiInteractionLayer(
                sizes[i], sizes[i + 1], self.dropout, self.extra["negative_slope"], self.compression
            )
            for i in range(len(layer_dims))
        )

        # Graph tensors are derived from the dataset: rebuilt, never checkpointed. Edge positions
        # are int32 when they fit (at 17.5M edges each int64 copy would hold 70 MB more); the
        # per-edge relation ids are needed only for this order, so they are not kept, nor the edge
        # list: each edge's ends are read from the CSR.
        order, counts = sort_by_relation(edges.relation, self.num_relations)
        self.relation_edge_counts = counts
        # where the user -> item edges sit in that order (a slice of `entries_by_relation`, not a
        # copy: 48 MiB at 10M)
        self.interaction_span = (sum(counts[:INTERACT]), counts[INTERACT])
        # compressed, a whole-graph layer pushes gradients back a block of rows at a time
        # (`ops.propagated_bi_interaction`): no transposed structure unless a backward asks
        self.graph = CSRGraph(
            edges.edge_index, self.num_nodes, transposed=not self.compression.enabled
        )
        # each edge's matrix entry, the edges in relation order: all the refresh and the KG
        # phase's interaction draws read. The edge order itself (`edges_by_relation`) and the
        # graph's edge -> entry map serve the per-edge attention of sampled steps only.
        order = compact(order)
        self.register_buffer(
            "entries_by_relation", self.graph.slot.index_select(0, order), persistent=False
        )
        self.register_buffer("edges_by_relation", order, persistent=False)
        # the two orders above hold the edge -> entry map (`edge_index` rebuilds it on request):
        # no session keeps the graph's own copy (671 MiB at 176M edges)
        self.graph.forget_edges()
        self.register_buffer("attention", torch.empty(edges.num_edges), persistent=False)
        self.register_buffer(
            "attention_entries", torch.empty(self.graph.num_entries), persistent=False
        )
        # scored when first read, not here: a training session refreshes it at its first epoch's
        # start anyway, and each refresh scores every edge (80 s at 100M triples + interactions)
        self._attention_scored = False

    @property
    def edge_index(self) -> torch.Tensor:
        """Every CKG edge `[2, E]` (sources, targets), in the dataset's order, made on request
        from the CSR and the edge order (not kept: 153 MiB at 20M edges)."""
        if self.edges_by_relation is None:
            raise RuntimeError(
                "KGAT's edge order was dropped for whole-graph training (on_whole_graph_training): "
                "build the model anew to read its edges"
            )
        entries = torch.empty_like(self.entries_by_relation)  # each edge's entry, in edge order
        entries[self.edges_by_relation.long()] = self.entries_by_relation
        return torch.stack(self.graph.entry_ends(entries, self.graph.entry_rows()))

    # -- attention ---------------------------------------------------------------------------------

    @property
    def num_edges(self) -> int:
        """The CKG's edges (each has its CSR entry in `entries_by_relation`)."""
        return int(self.entries_by_relation.shape[0])

    def on_epoch_start(self, epoch: int) -> None:
        self.refresh_attention()

    def before_tables_leave(self) -> None:
        self.ensure_attention()

    def ensure_attention(self) -> None:
        """Score the attention from the current weights if no refresh has yet (it is scored when
        first read)."""
        if not self._attention_scored:
            self.refresh_attention()

    def on_whole_graph_training(self) -> None:
        """Whole-graph steps read the attention's matrix entries only. What only sampled steps
        read goes: the per-edge attention and the edge order (two `[edges]` tensors, 134 MiB at
        17.5M edges, where `entries_by_relation`, kept in every session, adds 67); each refresh
        scores into a temporary."""
        self.attention = None
        self.edges_by_relation = None

    @torch.no_grad()
    def prepare_scoring(self, users: torch.Tensor | None = None) -> None:
        """Refresh the attention from the trained weights, then propagate (the original's order)."""
        self.refresh_attention()
        super().prepare_scoring(users)

    @torch.no_grad()
    def refresh_attention(self) -> None:
        """pi(h, r, t) for every edge from the current weights, softmax-normalised per head `h`
        (`edge_scores`), into the matrix entries and, kept for sampled steps, the per-edge
        `attention` in edge order: whole-graph and sampled sessions compute the same bits."""
        self._attention_scored = True
        scores = self.edge_scores()
        # a chunk of edges at a time: these ops widen an int32 index to int64 (4 MiB a chunk,
        # where the whole index widened would be 1.3 GiB at 100M)
        chunk = ATTENTION_CHUNK_FLOATS // 4
        self.attention_entries.zero_()
        for first in range(0, self.num_edges, chunk):
            part = scores[first : first + chunk]
            entries = self.entries_by_relation[first : first + chunk]
            self.attention_entries.index_add_(0, entries, part)
            if self.attention is not None:
                self.attention[self.edges_by_relation[first : first + chunk]] = part

    def edge_scores(self) -> torch.Tensor:
        """Every edge's attention in relation order (`entries_by_relation`), in one `[edges]`
        tensor and nothing else whole but the entries' rows: the edges are scored a chunk at a
        time, each chunk projecting its own ends (a `[nodes, dim]` projection of every node was
        half of the refresh's 2.9 GB of work at 100M triples + interactions), then normalised in
        place (`softmax_in_place`, each chunk's heads looked up again, not kept)."""
        embedding = self.node_embedding.detach()
        scores = self.attention_entries.new_empty(self.num_edges)
        entry_rows = self.graph.entry_rows()  # each entry's row: an edge's head
        col = self.graph.col  # an edge's tail
        chunk = max(1, ATTENTION_CHUNK_FLOATS // embedding.shape[1])
        start = 0
        for relation, count in enumerate(self.relation_edge_counts):
            transfer, relation_vector = self.transfer[relation], self.relation_embedding[relation]
            for first in range(start, start + count, chunk):
                stop = min(first + chunk, start + count)
                entries = self.entries_by_relation[first:stop]
                head_vectors = embedding.index_select(0, entry_rows.index_select(0, entries))
                tail_vectors = embedding.index_select(0, col.index_select(0, entries))
                # the chunk's gathered rows and their projections are its only [chunk, dim]
                # tensors; the head's are activated in place
                head_vectors = torch.mm(head_vectors, transfer).add_(relation_vector).tanh_()
                scores[first:stop] = torch.mm(tail_vectors, transfer).mul_(head_vectors).sum(-1)
            start += count

        def heads(first: int, stop: int) -> torch.Tensor:
            return entry_rows.index_select(0, self.entries_by_relation[first:stop])

        return softmax_in_place(scores, heads, self.num_nodes)

    # -- CF phase ----------------------------------------------------------------------------------

    def propagate(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Concatenated layer outputs `[e_0, norm(e_1), ...]` of users and items (scoring; a CF
        step gathers its batch's rows instead: `batch_vectors`)."""
        return self.propagate_users(None)

    def propagate_users(self, users: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """`propagate()` with only the rows of `users` (all users when None).

        Only those user rows and the item rows of each layer's output are normalized and kept
        (normalization is row-wise: the same values), never the whole output's normalized copy
        nor an all-node concatenation."""
        x = self.node_embedding
        if users is None:
            user_nodes = slice(self.n_entities, None)
        else:
            user_nodes = users.to(x.device) + self.n_entities
        users_out, items = [x[user_nodes]], [x[: self.n_items]]
        self.ensure_attention()
        for layer in self.layers:
            x, _ = layer(x, self.graph, self.attention_entries, normalize=False)
            users_out.append(ops.l2_normalize(x[user_nodes], dim=-1, config=self.compression))
            items.append(ops.l2_normalize(x[: self.n_items], dim=-1, config=self.compression))
        del x
        return torch.cat(users_out, dim=1), torch.cat(items, dim=1)

    def batch_vectors(self, users, pos_items, neg_items):
        """`propagate()`'s rows of the batch, gathered from each layer's output right after the
        layer: no `[users + items, final dim]` representations, whose gradients (two such dense
        tensors) were held through the whole backward, and no copies of every user's and item's
        rows of each layer in forward. Each gather's gradient (a `[nodes, dim]` tensor) is made
        just before its layer's backward, and only the gathered rows are normalized (the layer's
        `rows`), so no normalization's whole-graph gradient is made beside it. The same values;
        the same gradients up to the order of their sums (a node's duplicates in the batch, the
        table's parts)."""
        parts, sizes = self._batch_parts(users, pos_items, neg_items)
        u, pos, neg = torch.cat(parts, dim=1).split(sizes)
        return u, pos, neg

    def batch_vector_groups(self, users, pos_items, neg_items):
        """Compressed, two groups: the ego columns (rows of the table: the scores save them as
        their indices, exact) and the layers' normalized outputs (quantized at the scores' width).
        Saved as one concatenation, the ego columns (64 of 176 by default) were quantized with the
        rest. Uncompressed, FP32's one group (its bits unchanged)."""
        if not self.compression.enabled:
            return [self.batch_vectors(users, pos_items, neg_items)]
        parts, sizes = self._batch_parts(users, pos_items, neg_items)
        ego = parts[0].split(sizes)
        propagated = torch.cat(parts[1:], dim=1).split(sizes)
        return [tuple(ego), tuple(propagated)]

    def _batch_parts(self, users, pos_items, neg_items) -> tuple[list[torch.Tensor], list[int]]:
        """The batch's rows of the table and of each layer's normalized output, and the three
        sizes (users, positive, negative items) their rows split into."""
        nodes = torch.cat([users + self.n_entities, pos_items, neg_items])
        x = self.node_embedding
        parts = [x.index_select(0, nodes)]
        self.ensure_attention()
        for depth, layer in enumerate(self.layers, start=1):
            x, normalized = layer(
                x,
                self.graph,
                self.attention_entries,
                rows=nodes,
                output_saved_next=depth < len(self.layers),
            )
            parts.append(normalized)
        return parts, [len(users), len(pos_items), len(neg_items)]

    def ego_embeddings(self, users, pos_items, neg_items) -> list[torch.Tensor]:
        nodes = torch.cat([users + self.n_entities, pos_items, neg_items])
        return list(self.node_embedding.index_select(0, nodes).chunk(3))

    # -- CF phase on a sampled subgraph ------------------------------------------------------------

    def step_sampler(self, ckg, fanouts):
        from tinykg_train.scale.subgraphs import NeighborStepSampler, layer_blocks

        return NeighborStepSampler(ckg, fanouts, prepare=layer_blocks)

    def rows_needed(self, users, pos_items, neg_items, graph) -> dict[str, torch.Tensor]:
        return {"node_embedding": graph.sorted_node}

    def sampled_attention(self, graph) -> torch.Tensor:
        """Each sampled edge's attention, renormalised over its target's sampled edges."""
        if self.attention is None:
            raise RuntimeError(
                "KGAT's per-edge attention was dropped for whole-graph training "
                "(on_whole_graph_training): build the model anew for sampled steps"
            )
        self.ensure_attention()
        attention = self.attention.index_select(0, graph.edge_id)
        target = graph.edge_index[1]
        total = attention.new_zeros(graph.num_nodes).index_add_(0, target, attention)
        return attention / total.index_select(0, target)

    def local_propagate(self, graph, rows: Rows):
        final = torch.cat(self._local_parts(graph, rows("node_embedding", graph.node)), dim=1)
        return final, final, graph.batch

    def local_vector_groups(self, users, pos_items, neg_items, graph, rows: Rows):
        """Compressed, `batch_vector_groups`' two groups on the sampled subgraph: the ego columns
        read from the table at the batch's own nodes (rows of the table: saved as indices, exact,
        where the concatenation's were quantized), and the layers' columns at the seeds. FP32
        keeps the one concatenation."""
        return self.local_groups_and_ego(users, pos_items, neg_items, graph, rows)[0]

    def local_groups_and_ego(self, users, pos_items, neg_items, graph, rows: Rows):
        """The groups and the L2 penalty's ego rows from one gather of the node table (the
        subgraph's nodes, then the batch's): one table-sized gradient in backward where a gather
        each made three, two of them live at once while autograd added them."""
        nodes = torch.cat([graph.node, users + self.n_entities, pos_items, neg_items])
        gathered = rows("node_embedding", nodes)
        x, ego = gathered.split([graph.num_nodes, len(nodes) - graph.num_nodes])
        ego = list(ego.chunk(3))
        parts = self._local_parts(graph, x)

        def batch_rows(vectors: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(ops.embedding(vectors, at, config=self.compression) for at in graph.batch)

        if self.compression.enabled:
            groups = [tuple(ego), batch_rows(torch.cat(parts[1:], dim=1))]
        else:
            groups = [batch_rows(torch.cat(parts, dim=1))]
        return groups, (ego if self.l2 > 0 else None)

    def _local_parts(self, graph, x: torch.Tensor) -> list[torch.Tensor]:
        """The seeds' rows of the table (`x`: the rows of `graph.node`) and of each layer's
        normalized output on `graph`."""
        blocks = graph.aux["blocks"]
        # the matrix entries of every block are a prefix of the first block's: one tensor
        entries = blocks[0].values(self.sampled_attention(graph))
        seeds = graph.num_seeds
        outputs = [x[:seeds]]
        for layer, block in zip(self.layers, blocks, strict=True):
            values = entries[: block.num_entries]
            x, normalized = layer(x[: block.num_sources], block, values, block.num_nodes)
            outputs.append(normalized[:seeds])
        return outputs

    def local_ego(self, users, pos_items, neg_items, rows: Rows) -> list[torch.Tensor]:
        nodes = torch.cat([users + self.n_entities, pos_items, neg_items])
        return list(rows("node_embedding", nodes).chunk(3))

    # -- KG phase ----------------------------------------------------------------------------------

    def kg_loss(
        self, heads, relations, tails, neg_tails, rows: Rows | None = None, interactions=None
    ) -> torch.Tensor:
        """TransR loss on a KG batch, its inverse triples and as many sampled user-item triples;
        with `rows`, node vectors are read through it (sampled training) instead of the table;
        `interactions` `(user nodes, items, negative items)` replaces the drawn user-item triples
        (partitioned training draws them from the partition)."""
        triples = self.kg_phase_triples(heads, relations, tails, neg_tails, interactions)
        return self.transr_loss(*triples, rows=rows)

    def kg_phase_triples(
        self, heads, relations, tails, neg_tails, interactions=None
    ) -> tuple[torch.Tensor, ...]:
        """`(head, relation, tail, corrupted head, corrupted tail)` in CKG ids for one KG step.

        KG triples `(h, r, t)` against `(h, r, t')`; their inverses `(t, r^-1, h)` against
        `(t', r^-1, h)`; sampled `(u, interact, i)` against `(u, interact, j)` and
        `(i, interacted-by, u)` against `(j, interacted-by, u)`, `j` a random item.
        """
        R = self.n_kg_relations
        kg_relation = relations + FIRST_KG_RELATION
        users, items, neg_items = (
            self.sample_interactions(len(heads)) if interactions is None else interactions
        )
        interact = torch.full_like(users, INTERACT)
        return (
            torch.cat([heads, tails, users, items]),
            torch.cat([kg_relation, kg_relation + R, interact, interact + 1]),
            torch.cat([tails, heads, items, users]),
            torch.cat([heads, neg_tails, users, neg_items]),
            torch.cat([neg_tails, heads, neg_items, users]),
        )

    def transr_loss(
        self, heads, relations, tails, neg_heads, neg_tails, rows: Rows | None = None
    ) -> torch.Tensor:
        """Mean of -log sigmoid(f(corrupted) - f(true)), f = ||W_r e_h + e_r - W_r e_t||^2,
        plus `l2` times the L2 penalty on the projected vectors and relation embeddings."""
        nodes = torch.stack([heads, tails, neg_heads, neg_tails])
        projected = self.project(nodes, relations, rows)
        relation_vectors = self.relation_embedding.index_select(0, relations)
        ph, pt, nh, nt = projected
        pos_score, neg_score, squared_norms = ops.translation_scores(
            ph, relation_vectors, pt, nh, nt, with_norms=self.l2 > 0, config=self.compression
        )
        loss = softplus_mean(pos_score - neg_score)  # margins kept exact: see losses.softplus_mean
        if self.l2 > 0:  # losses.l2_penalty of the five, from the op's squared norms
            loss = loss + self.l2 * (squared_norms / (2 * max(len(heads), 1)))
        return loss

    def sample_interactions(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`n` random train (user node, item) pairs and a uniformly drawn negative item each."""
        start, count = self.interaction_span
        interaction_entries = self.entries_by_relation[start : start + count]
        device = interaction_entries.device
        picked = interaction_entries[torch.randint(count, (n,), device=device)]
        items, users = self.graph.entry_ends(picked)
        return users, items, torch.randint(self.n_items, (n,), device=device)

    def project(
        self, nodes: torch.Tensor, relation: torch.Tensor, rows: Rows | None = None
    ) -> torch.Tensor:
        """`W_r e_node` for nodes `[k, n]` whose column j goes with relation[j]: `[k, n, rel_dim]`;
        the node vectors read through `rows` when given."""
        order, counts = sort_by_relation(relation, self.num_relations)
        blocks = nodes[:, order].split(counts, dim=1)  # [k, count] node ids per relation
        ids = torch.cat([block.reshape(-1) for block in blocks])
        sizes = [block.numel() for block in blocks]
        if rows is None:
            vectors = self.node_embedding.index_select(0, ids)
        else:
            vectors = rows("node_embedding", ids)
        projected = ops.grouped_linear(vectors, self.transfer, sizes, config=self.compression)
        pieces = [
            part.view(*block.shape, self.transfer.shape[2])
            for part, block in zip(projected.split(sizes), blocks, strict=True)
        ]
        out = torch.cat(pieces, dim=1)
        return out.index_select(1, torch.argsort(order))
