"""The best epoch's weights live in the run dir, not in memory, and test the same as a copy did."""

from __future__ import annotations

import pytest
import torch

import tinykg_train.epoch as epoch_module
import tinykg_train.trainer as trainer_module
from tests.tinykg_train.test_trainer import comparable, mf_builder, tiny_config
from tinykg_train.best_weights import drop_older_best_weights, load_best_weights, save_best_weights
from tinykg_train.checkpoint import load_checkpoint
from tinykg_train.errors import TinyKGError
from tinykg_train.run_dir import RunDir
from tinykg_train.trainer import train


def test_a_run_tests_its_best_epoch_from_the_run_dir_as_from_a_copy_in_memory(
    tiny_dataset_dir, tmp_path, monkeypatch
):
    config = dict(epochs=5, lr=0.2)  # large steps: valid improves on some epochs, not on others
    on_disk = train(
        tiny_config(tiny_dataset_dir, tmp_path / "disk", **config), model_builder=mf_builder
    )
    history = [row["recall@20"] for row in on_disk["valid_history"]]
    assert on_disk["best_epoch"] < len(history) - 1, history  # the best is not simply the last
    run = RunDir(tmp_path / "disk")
    assert [p.name for p in run.path.glob("best_model_epoch*.pt")] == [
        f"best_model_epoch{on_disk['best_epoch']}.pt"
    ]
    checkpoint = load_checkpoint(run.checkpoint)
    assert checkpoint["state"]["best_model"] is None  # no second copy of the weights in it
    best = load_best_weights(run, on_disk["best_epoch"])
    assert set(best) == set(checkpoint["model"])

    for module in (epoch_module, trainer_module):  # as a data-parallel worker keeps them
        monkeypatch.setattr(module, "kept_on_disk", lambda session: False)
    in_memory = train(
        tiny_config(tiny_dataset_dir, tmp_path / "memory", **config), model_builder=mf_builder
    )
    assert comparable(on_disk) == comparable(in_memory)
    assert not list((tmp_path / "memory").glob("best_model_epoch*.pt"))
    kept = load_checkpoint(tmp_path / "memory" / "checkpoint.pt")["state"]["best_model"]
    assert all(torch.equal(kept[name], best[name]) for name in best)


def test_older_best_weights_are_dropped_once_a_checkpoint_names_a_newer_epoch(tmp_path):
    run = RunDir(tmp_path).create()
    for epoch in (1, 3, 4):
        save_best_weights(run, epoch, {"weight": torch.full((2,), float(epoch))})
    drop_older_best_weights(run, 3)  # epoch 4's file: written, then killed before its checkpoint
    assert [p.name for p in tmp_path.glob("best_model_epoch*.pt")] == ["best_model_epoch3.pt"]
    assert torch.equal(load_best_weights(run, 3)["weight"], torch.full((2,), 3.0))


def test_missing_or_mismatched_best_weights_are_one_line_errors(tmp_path):
    run = RunDir(tmp_path).create()
    with pytest.raises(
        TinyKGError, match=r"best_model_epoch2\.pt: the best epoch's weights are missing"
    ):
        load_best_weights(run, 2)
    save_best_weights(run, 5, {"weight": torch.zeros(1)})
    run.best_model(5).rename(run.best_model(2))
    with pytest.raises(TinyKGError, match="holds epoch 5's weights, not 2's"):
        load_best_weights(run, 2)
