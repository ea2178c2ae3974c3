"""The rows one training step works on, as differentiable tensors on the device."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tinykg_train.errors import TinyKGError


@dataclass
class GatheredTable:
    """One table's part of a step: its sorted unique ids (on the device; `ids_host` a host copy,
    made when first needed), their rows as a leaf, where the rows live in the store (`index`, on the
    device) and the store's handle on them (pinned cache slots, or None)."""

    ids: torch.Tensor
    leaf: torch.Tensor
    index: torch.Tensor
    handle: torch.Tensor | None
    ids_host: torch.Tensor | None = None

    def ids_on(self, device: torch.device) -> torch.Tensor:
        if self.ids.device == device:
            return self.ids
        if self.ids_host is None:
            self.ids_host = self.ids.cpu()
        return self.ids_host.to(device)


class StepRows:
    """What `RowTables.gather` returns and `RowTables.step` consumes.

    `rows(table, ids)` looks rows up by global id with a sparse gradient, so the step updates exactly
    the rows looked up (`nn.Embedding(sparse=True)` semantics). `rows.leaves[table]` is the whole
    gathered block [n, dim] in the order of `rows.ids[table]`: using it directly (say as a sampled
    subgraph's node features) gives it a dense gradient, and then every gathered row counts as
    present in the step.
    """

    def __init__(self, owner: object, tables: dict[str, GatheredTable]):
        self.owner = owner
        self.tables = tables
        self.stepped = False

    @property
    def ids(self) -> dict[str, torch.Tensor]:
        return {name: part.ids for name, part in self.tables.items()}

    @property
    def leaves(self) -> dict[str, torch.Tensor]:
        return {name: part.leaf for name, part in self.tables.items()}

    def __call__(self, table: str, ids: torch.Tensor) -> torch.Tensor:
        """Rows at global `ids` (any shape; each must have been gathered): `ids.shape + (dim,)`.
        Membership is checked (on CUDA ids that costs one device sync per call)."""
        part = self.tables.get(table)
        if part is None:
            raise TinyKGError(
                f"table '{table}' was not gathered for this step (gathered: {sorted(self.tables)}); "
                f"name it in gather's needed ids"
            )
        ids = ids.long()
        known = part.ids_on(ids.device)
        position = torch.searchsorted(known, ids)
        if ids.numel() and (
            known.numel() == 0
            or not bool((known[position.clamp(max=known.numel() - 1)] == ids).all())
        ):
            raise TinyKGError(
                f"ids of table '{table}' were looked up that this step did not gather; "
                f"add them to gather's needed ids"
            )
        return F.embedding(position.to(part.leaf.device), part.leaf, sparse=True)
