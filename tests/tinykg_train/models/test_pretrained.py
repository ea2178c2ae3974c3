"""KGAT started from a BPR-MF run: its best user and item vectors become the ego embeddings."""

from __future__ import annotations

import pytest
import torch

from tinykg_train.checkpoint import save_checkpoint
from tinykg_train.errors import ConfigError
from tinykg_train.models import build_model


@pytest.fixture
def bprmf_run(tiny_dataset, make_config, tmp_path):
    """A run dir whose checkpoint holds last weights and (different) best weights, as the trainer's."""
    torch.manual_seed(1)
    best = build_model("bprmf", tiny_dataset, make_config(model="bprmf")).state_dict()
    last = {key: value + 1 for key, value in best.items()}
    save_checkpoint(tmp_path / "checkpoint.pt", {"model": last, "state": {"best_model": best}})
    return tmp_path, best


def test_kgat_starts_from_the_runs_best_vectors(tiny_dataset, make_config, bprmf_run):
    run_dir, best = bprmf_run
    model = build_model("kgat", tiny_dataset, make_config(extra={"pretrained": str(run_dir)}))
    n_entities, n_items = tiny_dataset.n_entities, tiny_dataset.n_items
    assert torch.equal(model.node_embedding[n_entities:].detach(), best["user_embedding"])
    assert torch.equal(model.node_embedding[:n_items].detach(), best["item_embedding"])
    # The other entities keep their initialisation.
    assert model.node_embedding[n_items:n_entities].abs().max() < 0.1


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"embed_dim": 8}, "has users of shape .* this run needs"),
        ({"extra": {"pretrained": "/nonexistent/run"}}, "not found; give a finished"),
    ],
)
def test_unusable_runs_are_config_errors(tiny_dataset, make_config, bprmf_run, settings, message):
    run_dir, _ = bprmf_run
    settings = {"extra": {"pretrained": str(run_dir)}, **settings}
    with pytest.raises(ConfigError, match=message):
        build_model("kgat", tiny_dataset, make_config(**settings))


def test_a_checkpoint_of_another_model_is_refused(tiny_dataset, make_config, tmp_path):
    lightgcn = build_model("lightgcn", tiny_dataset, make_config(model="lightgcn"))
    save_checkpoint(tmp_path / "checkpoint.pt", {"model": lightgcn.state_dict(), "state": {}})
    with pytest.raises(ConfigError, match="is not a BPR-MF checkpoint"):
        build_model("kgat", tiny_dataset, make_config(extra={"pretrained": str(tmp_path)}))
