"""The best epoch's weights, kept in the run dir instead of in memory.

A run tests the weights of its best valid epoch at the end. Held in memory, that copy is one more
of every table for the rest of the run, beside the table, its gradient and Adam's state (305 MiB of
KGAT's node table on the 10M-triple graph, from the first evaluation to the last step). A run that
owns its run dir writes them to `best_model_epoch{N}.pt` when valid improves, before the epoch's
checkpoint (a kill between the two re-runs the epoch, which writes them again), drops older such
files once a checkpoint names a newer best epoch, and reads them back to test. A data-parallel
worker keeps them in memory: the leader's run dir may be on another machine.
"""

from __future__ import annotations

from typing import Any

import torch

from tinykg_train.checkpoint import load_checkpoint, save_checkpoint
from tinykg_train.errors import TinyKGError
from tinykg_train.run_dir import RunDir


def kept_on_disk(session: Any) -> bool:
    """Whether this session keeps its best weights in its run dir (not a data-parallel worker)."""
    return session.replica is None


def save_best_weights(run: RunDir, epoch: int, weights: dict[str, torch.Tensor]) -> None:
    """Write epoch `epoch`'s weights (a model's `state_dict()`) as the run's best, atomically."""
    save_checkpoint(run.best_model(epoch), {"epoch": epoch, "model": weights})


def load_best_weights(run: RunDir, epoch: int) -> dict[str, torch.Tensor]:
    """The weights `save_best_weights` wrote for `epoch` (on the CPU)."""
    path = run.best_model(epoch)
    if not path.is_file():
        raise TinyKGError(
            f"{path}: the best epoch's weights are missing (deleted?); resume from an earlier "
            "checkpoint or train the run again"
        )
    saved = load_checkpoint(path)
    if saved.get("epoch") != epoch:
        raise TinyKGError(f"{path}: holds epoch {saved.get('epoch')}'s weights, not {epoch}'s")
    return saved["model"]


def drop_older_best_weights(run: RunDir, best_epoch: int) -> None:
    """Delete the run dir's best weights of epochs other than `best_epoch` (after a checkpoint that
    names it: a kill before then keeps the file it names)."""
    keep = run.best_model(best_epoch)
    for path in run.path.glob("best_model_epoch*.pt"):
        if path != keep:
            path.unlink(missing_ok=True)
