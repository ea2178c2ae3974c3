"""Where a run stands between epochs: early stopping, the best weights so far, per-epoch history.

Kept as plain data (`to_dict`/`from_dict`) so it rides in a `weights_only=True` checkpoint and a
resumed run continues exactly where the killed one stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

STOP_METRIC = "recall@20"  # early stopping and the best epoch follow valid Recall@20


@dataclass
class TrainingState:
    """Progress of one run. `history` holds one row per finished epoch (losses, seconds, valid metrics)."""

    next_epoch: int = 0
    best_value: float = float("-inf")
    best_epoch: int = -1
    best_valid: dict[str, float] = field(default_factory=dict)
    best_model: dict[str, torch.Tensor] | None = None
    evals_without_gain: int = 0
    stopped_early: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)
    activation_by_module: dict[str, int] = field(default_factory=dict)
    memory_breakdown: dict[str, dict] = field(default_factory=dict)  # see memory_breakdown

    def observe(
        self,
        epoch: int,
        valid: dict[str, float],
        model: torch.nn.Module | None,
        patience: int,
        min_epochs: int = 0,
    ) -> bool:
        """Record one evaluation; keep a copy of `model`'s weights when valid Recall@20 improved
        (None: the caller keeps them, `best_weights`). True if it did. Stops early after
        `patience` evaluations without gain, but not before `min_epochs` epochs have run (a
        plateau in the first epochs is not convergence)."""
        value = valid[STOP_METRIC]
        if value > self.best_value:
            self.best_value, self.best_epoch, self.best_valid = value, epoch, dict(valid)
            self.best_model = (
                None
                if model is None
                else {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            )
            self.evals_without_gain = 0
            return True
        self.evals_without_gain += 1
        if self.evals_without_gain >= patience and epoch + 1 >= min_epochs:
            self.stopped_early = True
        return False

    def column(self, key: str) -> list[Any]:
        """One history column, e.g. `column("epoch_seconds")`, skipping epochs that lack it."""
        return [row[key] for row in self.history if key in row]

    def valid_history(self) -> list[dict[str, Any]]:
        """The evaluated epochs' valid metrics."""
        return [
            {k: v for k, v in row.items() if k == "epoch" or k.startswith(("recall@", "ndcg@"))}
            for row in self.history
            if row.get("evaluated")
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "next_epoch": self.next_epoch,
            "best_value": self.best_value,
            "best_epoch": self.best_epoch,
            "best_valid": dict(self.best_valid),
            "best_model": self.best_model,
            "evals_without_gain": self.evals_without_gain,
            "stopped_early": self.stopped_early,
            "history": [dict(row) for row in self.history],
            "activation_by_module": dict(self.activation_by_module),
            "memory_breakdown": {k: dict(v) for k, v in self.memory_breakdown.items()},
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainingState:
        return cls(**values)
