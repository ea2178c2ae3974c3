"""The `Recommender` contract every model follows, and the base of the full-graph embedding models.

The trainer calls exactly: `has_kg_phase`, `on_epoch_start(epoch)`, `loss(users, pos_items,
neg_items)`, `kg_loss(heads, relations, tails, neg_tails)` (when `has_kg_phase`),
`prepare_scoring()` and `score_users(users)`, and reads `compression`: every model builds its forward
from `tinykg_train.compress.ops` with `self.compression` (and its layers with theirs), and the
trainer's saved-tensor hooks use the model's `compression` too, so one `CompressionConfig` object
serves the whole run. `set_compression` is the one way to change it, for the model or one part.

Sampled training (`--sampler neighbor`) calls, beside those: `step_sampler(ckg, fanouts)` once (the
sampler of one CF step's subgraph, run in a background thread), then per step `local_loss(users,
pos_items, neg_items, graph, rows)` on the batch's sampled `graph`, reading the big embedding tables
only through `rows(table, ids)` at the ids `rows_needed(...)` names (see `models.rows`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from tinykg_train.compress import CompressionConfig, ops
from tinykg_train.compress.modules import CompressedModule
from tinykg_train.compress.modules import set_compression as set_compression_in
from tinykg_train.errors import ConfigError, TinyKGError
from tinykg_train.model_defaults import knob
from tinykg_train.models.losses import bpr_loss_of_groups, l2_penalty
from tinykg_train.models.rows import ParameterRows, Rows


class Recommender(CompressedModule):
    """A KG recommender: BPR loss on (user, positive, negative) batches, scores against all items.

    Subclasses implement `loss` and `score_users`; they may cache what scoring needs in
    `prepare_scoring` (called in eval mode under `no_grad` before each evaluation). The cache is
    dropped whenever the model goes back to training mode, so stale scores are never served.
    """

    #: Whether the trainer runs a second (KG) phase each epoch with `kg_loss`.
    has_kg_phase: bool = False
    #: Whether propagation follows KG edges (partitioned training then copies each partition's
    #: `n_layers`-hop KG neighborhood into it; LightGCN follows only user-item edges).
    follows_kg: bool = True
    #: Model-specific knobs read from `config.extra`, with their defaults (the built-in models take
    #: theirs from `tinykg_train.model_defaults.KNOBS`, which also has their types).
    EXTRA_DEFAULTS: dict[str, Any] = {}
    #: The big embedding tables (rows per user, item, entity or node): what `--adam-state` keeps
    #: compact Adam state for, and, read through `rows` on the local path, what `--sparse-adam` /
    #: `--offload-embeddings` train row by row (`scale.RowTables`).
    embedding_tables: tuple[str, ...] = ()
    #: Whether every activation its training steps save goes through `tinykg_train.compress.ops`
    #: (each compresses what it saves): the steps then skip `compress_saved_tensors`' hooks and
    #: their Python per saved tensor (`compress.through_ops_only`), storing the same bytes
    #: (tests/tinykg_train/models/test_saves_through_ops.py measures both ways).
    saves_through_ops: bool = False

    def __init__(self, dataset, config) -> None:
        super().__init__()
        self.n_users = int(dataset.n_users)
        self.n_items = int(dataset.n_items)
        self.n_entities = int(dataset.n_entities)
        self.embed_dim = int(config.embed_dim)
        self.l2 = float(config.l2)
        self.dropout = float(config.dropout)
        self.compression = config.compression_config()
        self.extra = self.read_extra(config.extra)

    @classmethod
    def read_extra(cls, extra: dict[str, Any]) -> dict[str, Any]:
        """This model's knobs: `EXTRA_DEFAULTS` updated by its keys of `config.extra`, each in its
        knob's type (a `TrainConfig` has coerced them already; other configs get the same checks)."""
        own = {k: v for k, v in extra.items() if k in cls.EXTRA_DEFAULTS}
        return {
            **cls.EXTRA_DEFAULTS,
            **{k: v if knob(k) is None else knob(k).coerce(k, v) for k, v in own.items()},
        }

    def set_compression(
        self, compression: CompressionConfig, module: nn.Module | None = None
    ) -> None:
        """Use `compression` from now on in this model and every compressed layer of it, or, given
        `module` (a part of this model, e.g. one layer), only in that part (per-layer widths).

        The model's own `compression` (what the trainer's saved-tensor hooks and the loss use)
        changes only when the whole model is set.
        """
        if module is None:
            module = self
        elif not any(part is module for part in self.modules()):
            raise TinyKGError(
                f"set_compression: {type(module).__name__} is not a part of this {type(self).__name__}"
            )
        set_compression_in(module, compression)

    def on_epoch_start(self, epoch: int) -> None:
        """Called by the trainer before each epoch's first step (KGAT refreshes its attention)."""

    def before_tables_leave(self) -> None:
        """Called by `scale.TableTraining` before it takes the embedding tables out of the model
        (they come back only for whole-graph blocks): a model derives now what it has not yet
        derived from them and its steps will read (KGAT: its attention, scored when first read)."""

    def on_whole_graph_training(self) -> None:
        """Called once by a session whose CF steps propagate over the whole graph (no sampler, no
        partitions): a model may drop what only sampled steps read (KGAT: its per-edge attention and
        edge order; KGAT, KGIN, LightGCN: their graphs' edge -> entry maps, `CSRGraph.forget_edges`)."""

    def loss(self, users: torch.Tensor, pos_items: torch.Tensor, neg_items: torch.Tensor):
        """BPR loss of one batch plus `l2` times the L2 penalty on the embeddings it touches."""
        raise NotImplementedError

    def kg_loss(self, heads, relations, tails, neg_tails) -> torch.Tensor:
        """The KG phase's loss; only models with `has_kg_phase` have one."""
        raise TinyKGError(f"{type(self).__name__} has no KG phase (has_kg_phase is False)")

    # -- sampled training: the local path -----------------------------------------------------------

    def step_sampler(self, ckg, fanouts: tuple[int, ...]) -> Any:
        """The sampler (`sample(users, pos_items, neg_items, rng) -> graph`) of one CF step's
        subgraph on the `kg_data.CKG`; a model without a graph to sample raises ConfigError."""
        raise ConfigError(
            f"{type(self).__name__} has no graph to sample: train it with --sampler none"
        )

    def rows_needed(self, users, pos_items, neg_items, graph) -> dict[str, torch.Tensor]:
        """The global ids (sorted, distinct) of every table row `local_loss` reads, per table."""
        raise NotImplementedError

    def local_loss(self, users, pos_items, neg_items, graph, rows: Rows | None = None):
        """`loss` of the batch computed on its sampled `graph` alone; tables read via `rows`."""
        raise NotImplementedError

    def parameter_rows(self) -> Rows:
        """The default `rows`: the model's own parameters (see `models.rows`)."""
        return ParameterRows(self)

    def prepare_scoring(self, users: torch.Tensor | None = None) -> None:
        """Compute once what `score_users` needs (the trainer calls it in eval mode, no grad).
        `users`: the only users the coming `score_users` calls ask for (None: any of them); a
        model may compute theirs alone (the evaluator passes the users it ranks to a model whose
        `prepare_scoring` takes them)."""

    def score_users(self, users: torch.Tensor) -> torch.Tensor:
        """Scores `[len(users), n_items]` of the given users against every item."""
        raise NotImplementedError

    def train(self, mode: bool = True) -> Recommender:
        if mode:
            self.clear_scoring_cache()
        return super().train(mode)

    def clear_scoring_cache(self) -> None:
        """Forget what `prepare_scoring` computed (the weights are about to change)."""

    @contextmanager
    def evaluating(self) -> Iterator[None]:
        """Eval mode (no dropout) for a while, then the previous mode, keeping the scoring cache."""
        was_training = self.training
        nn.Module.train(self, False)
        try:
            yield
        finally:
            nn.Module.train(self, was_training)


class EmbeddingRecommender(Recommender):
    """A model whose forward yields one final vector per user and per item; score = dot product.

    Subclasses implement `propagate()` -> (user vectors [n_users, D], item vectors [n_items, D])
    and `ego_embeddings(users, items...)` (the layer-0 rows the L2 penalty applies to); they may add
    a term with `extra_loss()` (KGIN's intent independence).
    """

    def __init__(self, dataset, config) -> None:
        super().__init__(dataset, config)
        self._scoring: tuple[torch.Tensor, torch.Tensor] | None = None
        self._scoring_users: torch.Tensor | None = None  # sorted ids of the cached user rows

    def propagate(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def ego_embeddings(
        self, users: torch.Tensor, pos_items: torch.Tensor, neg_items: torch.Tensor
    ) -> list[torch.Tensor]:
        raise NotImplementedError

    def extra_loss(self) -> torch.Tensor | None:
        return None

    def batch_vectors(
        self, users: torch.Tensor, pos_items: torch.Tensor, neg_items: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The final vectors of a CF batch's users, positive and negative items: their rows of
        `propagate()` (a model may gather them without building every user's and item's)."""
        user_vectors, item_vectors = self.propagate()
        config = self.compression
        return (
            ops.embedding(user_vectors, users, config=config),
            ops.embedding(item_vectors, pos_items, config=config),
            ops.embedding(item_vectors, neg_items, config=config),
        )

    def batch_vector_groups(
        self, users: torch.Tensor, pos_items: torch.Tensor, neg_items: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """`batch_vectors` as groups of columns, `[(users, pos, neg), ...]`, whose score margins
        add up to the batch's (`bpr_loss_of_groups`). One group here; a model whose final vectors
        concatenate rows of a parameter with computed columns (KGAT) puts those rows in a group of
        their own, so the scores save them as indices, exact, instead of quantizing them."""
        return [self.batch_vectors(users, pos_items, neg_items)]

    def local_propagate(self, graph, rows: Rows) -> tuple[torch.Tensor, torch.Tensor, tuple]:
        """The local path's `propagate`: `(user vectors, item vectors, (user index, positive
        index, negative index))`, the batch's rows found at those indices of the two."""
        raise NotImplementedError

    def local_ego(self, users, pos_items, neg_items, rows: Rows) -> list[torch.Tensor]:
        """The local path's `ego_embeddings`, read through `rows`."""
        raise NotImplementedError

    def local_vector_groups(
        self, users, pos_items, neg_items, graph, rows: Rows
    ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The local path's `batch_vector_groups`: the batch's rows of `local_propagate`, one
        group here (KGAT puts its ego columns in a group of their own, as in `loss`)."""
        config = self.compression
        user_vectors, item_vectors, (at_user, at_pos, at_neg) = self.local_propagate(graph, rows)
        return [
            (
                ops.embedding(user_vectors, at_user, config=config),
                ops.embedding(item_vectors, at_pos, config=config),
                ops.embedding(item_vectors, at_neg, config=config),
            )
        ]

    def local_groups_and_ego(
        self, users, pos_items, neg_items, graph, rows: Rows
    ) -> tuple[list[tuple[torch.Tensor, ...]], list[torch.Tensor] | None]:
        """`local_vector_groups` and the batch's ego rows of the L2 penalty (None without one). A
        model may read both in one gather of its table (KGAT): each gather's gradient is a dense
        table-sized tensor, and two of them are live at once while autograd adds them."""
        groups = self.local_vector_groups(users, pos_items, neg_items, graph, rows)
        ego = self.local_ego(users, pos_items, neg_items, rows) if self.l2 > 0 else None
        return groups, ego

    def local_loss(self, users, pos_items, neg_items, graph, rows: Rows | None = None):
        """BPR (and the L2 and extra terms) as in `loss`, from a propagation over `graph` only."""
        rows = self.parameter_rows() if rows is None else rows
        groups, ego = self.local_groups_and_ego(users, pos_items, neg_items, graph, rows)
        loss = bpr_loss_of_groups(groups, config=self.compression)
        if self.l2 > 0:
            loss = loss + self.l2 * l2_penalty(ego, config=self.compression)
        extra = self.extra_loss()
        return loss if extra is None else loss + extra

    def loss(self, users: torch.Tensor, pos_items: torch.Tensor, neg_items: torch.Tensor):
        # The L2 penalty's rows are gathered before the propagation, so that their gradient comes
        # last in backward: autograd runs the ready node made last first, and a gather's gradient
        # is a dense table-sized tensor, held from when it runs until the table's gradient is
        # complete (gathered after, it ran first and was held through the whole propagation's
        # backward: one more [nodes, dim] at a whole-graph step's peak).
        ego = self.ego_embeddings(users, pos_items, neg_items) if self.l2 > 0 else None
        groups = self.batch_vector_groups(users, pos_items, neg_items)
        loss = bpr_loss_of_groups(groups, config=self.compression)
        if ego is not None:
            loss = loss + self.l2 * l2_penalty(ego, config=self.compression)
        extra = self.extra_loss()
        return loss if extra is None else loss + extra

    @torch.no_grad()
    def prepare_scoring(self, users: torch.Tensor | None = None) -> None:
        """`propagate()`'s vectors, kept for `score_users`; with `users`, only their rows (a
        ranking of 20,000 sampled users of 250,000 keeps 13 of 168 MiB of KGAT's user vectors)."""
        with self.evaluating():
            if users is None:
                self._scoring, self._scoring_users = self.propagate(), None
                return
            kept = torch.unique(users.long())
            self._scoring = self.propagate_users(kept)
            self._scoring_users = kept.to(self._scoring[0].device)

    def propagate_users(self, users: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`propagate()`'s rows of `users` (sorted ids) and every item's vectors; a model may make
        only those user rows (KGAT does)."""
        user_vectors, item_vectors = self.propagate()
        return user_vectors.index_select(0, users.to(user_vectors.device)), item_vectors

    def clear_scoring_cache(self) -> None:
        self._scoring, self._scoring_users = None, None

    @torch.no_grad()
    def score_users(self, users: torch.Tensor) -> torch.Tensor:
        if self._scoring is None:
            self.prepare_scoring()
        user_vectors, item_vectors = self._scoring
        users = users.to(user_vectors.device)
        if self._scoring_users is not None:
            users = _rows_of(self._scoring_users, users.long())
        return user_vectors.index_select(0, users) @ item_vectors.T


def _rows_of(kept: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
    """Positions of `users` in the sorted `kept` ids; a user outside them is an error."""
    rows = torch.searchsorted(kept, users).clamp_(max=max(len(kept) - 1, 0))
    missing = (
        kept.index_select(0, rows) != users
        if len(kept)
        else torch.ones_like(users, dtype=torch.bool)
    )
    if bool(missing.any()):
        user = int(users[missing.nonzero()[0, 0]])
        raise TinyKGError(
            f"score_users: user {user} is not among the users prepare_scoring(users=...) was given; "
            "call prepare_scoring() again with them (or with none, for every user)"
        )
    return rows
