"""Checkpoints: weights_only round trip, RNG states that continue the same streams, clear errors."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from tinykg_train.checkpoint import (
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
    seed_everything,
)
from tinykg_train.errors import TinyKGError
from tinykg_train.training_state import TrainingState


def draws() -> tuple[list[float], list[float], list[float], float]:
    """One draw from every generator a run uses (NumPy's gaussian twice: it caches a value)."""
    return (
        torch.rand(3).tolist(),
        np.random.standard_normal(3).tolist(),
        [random.random(), random.gauss(0, 1)],
        float(torch.nn.functional.dropout(torch.ones(8), 0.5).sum()),
    )


def test_rng_states_survive_a_weights_only_round_trip(tmp_path):
    seed_everything(5)
    draws()  # move every generator off its seed; 3 normals leave NumPy's second gaussian cached
    assert np.random.get_state()[3] == 1 and random.getstate()[2] is not None
    save_checkpoint(tmp_path / "c.pt", {"rng": capture_rng_state()})
    expected = draws()
    seed_everything(99)  # scramble
    draws()
    restore_rng_state(load_checkpoint(tmp_path / "c.pt")["rng"])
    assert draws() == expected


def test_a_model_optimizer_and_state_round_trip(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    state = TrainingState(next_epoch=2, evals_without_gain=1)
    state.observe(1, {"recall@20": 0.25, "ndcg@20": 0.1}, model, patience=3)
    state.history.append({"epoch": 1, "train_loss": 0.5, "evaluated": True, "recall@20": 0.25})
    save_checkpoint(
        tmp_path / "c.pt",
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "state": state.to_dict(),
        },
    )
    loaded = load_checkpoint(tmp_path / "c.pt")  # weights_only=True inside
    copy = torch.nn.Linear(4, 3)
    copy_optimizer = torch.optim.Adam(copy.parameters(), lr=0.1)
    copy.load_state_dict(loaded["model"])
    copy_optimizer.load_state_dict(loaded["optimizer"])
    assert all(
        torch.equal(a, b) for a, b in zip(model.parameters(), copy.parameters(), strict=True)
    )
    step = optimizer.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(copy_optimizer.state_dict()["state"][0]["exp_avg"], step)
    restored = TrainingState.from_dict(loaded["state"])
    assert restored.to_dict().keys() == state.to_dict().keys()
    assert (restored.next_epoch, restored.best_epoch, restored.best_value) == (2, 1, 0.25)
    assert torch.equal(restored.best_model["weight"], model.weight)
    assert restored.history == state.history


def test_checkpoints_hold_nothing_that_needs_pickle(tmp_path):
    path = save_checkpoint(tmp_path / "c.pt", {"rng": capture_rng_state()})
    torch.load(path, weights_only=True)  # raises if anything would need unpickling code


def test_unreadable_missing_and_foreign_checkpoints(tmp_path):
    with pytest.raises(TinyKGError, match="no checkpoint to resume from"):
        load_checkpoint(tmp_path / "missing.pt")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(TinyKGError, match="unreadable checkpoint .*; delete it to start over"):
        load_checkpoint(garbage)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.ones(2)}, foreign)
    with pytest.raises(TinyKGError, match="checkpoint version None, this trainer reads 1"):
        load_checkpoint(foreign)


def test_saving_is_atomic(tmp_path):
    path = save_checkpoint(tmp_path / "c.pt", {"value": torch.ones(3)})

    class Boom(torch.nn.Module):
        def __reduce_ex__(self, protocol):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        save_checkpoint(path, {"value": Boom()})
    assert torch.equal(load_checkpoint(path)["value"], torch.ones(3))  # the old one is intact
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary file left
