"""How a model's local (sampled) path reads its big embedding tables: `rows(table, ids)`.

The local path never touches a big table directly: it asks a *rows* callable for the rows it needs,
`rows(table_name, global_ids) -> differentiable [len(ids), dim]` (ids 1-D, repeats allowed), and
names them beforehand in `rows_needed`. `ParameterRows` is the plain reader over the model's own
parameters (dense gradients, the run's Adam); a row store (tables updated row-wise, kept in host
memory with a device cache) plugs in through the same call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tinykg_train.compress import ops

#: `rows(table, ids) -> rows`: what a model's local path reads its tables with.
Rows = Callable[[str, torch.Tensor], torch.Tensor]


class ParameterRows:
    """`rows(table, ids)` = `ops.embedding(model.<table>, ids)`: rows of the model's parameters,
    saved for backward as their indices (exact, see `compress.gathered`)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def __call__(self, table: str, ids: torch.Tensor) -> torch.Tensor:
        weight = getattr(self.model, table)
        return ops.embedding(weight, ids, config=self.model.compression)
