"""Start a model from the user and item vectors of a finished BPR-MF run.

The original KGAT code does this by default (`--pretrain -1`: load the MF embeddings, then train
KGAT): propagation and the KG then refine a good collaborative signal instead of learning it from
scratch. The run's best weights are used (its best_model_epochN.pt beside the checkpoint, or an older
run's copy inside it), else its last ones.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tinykg_train.best_weights import load_best_weights
from tinykg_train.checkpoint import load_checkpoint
from tinykg_train.errors import ConfigError
from tinykg_train.run_dir import RunDir


def load_mf_embeddings(
    path: str | Path, n_users: int, n_items: int, dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(user vectors [n_users, dim], item vectors [n_items, dim])` of a BPR-MF run dir or checkpoint."""
    path = Path(path)
    checkpoint_path = path / "checkpoint.pt" if path.is_dir() else path
    if not checkpoint_path.is_file():
        raise ConfigError(
            f"'pretrained': {checkpoint_path} not found; give a finished `--model bprmf` run dir"
        )
    checkpoint = load_checkpoint(checkpoint_path)
    state, run = checkpoint.get("state") or {}, RunDir(checkpoint_path.parent)
    weights = state.get("best_model") or checkpoint.get("model") or {}
    best_epoch = state.get("best_epoch", -1)
    if not state.get("best_model") and run.best_model(best_epoch).is_file():
        weights = load_best_weights(run, best_epoch)  # kept beside the checkpoint
    users, items = weights.get("user_embedding"), weights.get("item_embedding")
    if users is None or items is None:
        raise ConfigError(
            f"'pretrained': {checkpoint_path} is not a BPR-MF checkpoint (no user/item embeddings)"
        )
    expected = {"users": (n_users, dim), "items": (n_items, dim)}
    for name, tensor in (("users", users), ("items", items)):
        if tuple(tensor.shape) != expected[name]:
            raise ConfigError(
                f"'pretrained': {checkpoint_path} has {name} of shape {tuple(tensor.shape)}, this run needs {expected[name]} (same dataset and embed_dim)"
            )
    return users.float(), items.float()
