"""Early stopping, best weights and history columns of TrainingState."""

from __future__ import annotations

import torch

from tinykg_train.training_state import TrainingState


def test_best_weights_follow_valid_recall_and_patience_stops():
    model = torch.nn.Linear(2, 1, bias=False)
    state = TrainingState()
    values = [0.1, 0.3, 0.2, 0.3, 0.25]
    improved = []
    for epoch, value in enumerate(values):
        with torch.no_grad():
            model.weight.fill_(epoch)
        improved.append(state.observe(epoch, {"recall@20": value}, model, patience=3))
    assert improved == [True, True, False, False, False]  # a tie is not a gain
    assert (state.best_epoch, state.best_value) == (1, 0.3)
    assert torch.equal(state.best_model["weight"], torch.full((1, 2), 1.0))  # a copy, not a view
    assert state.stopped_early


def test_min_epochs_holds_early_stopping_back_until_then():
    model = torch.nn.Linear(2, 1, bias=False)
    state = TrainingState()
    values = [0.3, 0.1, 0.1, 0.1, 0.1, 0.1]  # no gain after epoch 0
    stopped = []
    for epoch, value in enumerate(values):
        state.observe(epoch, {"recall@20": value}, model, patience=2, min_epochs=5)
        stopped.append(state.stopped_early)
    assert stopped == [False, False, False, False, True, True]  # epoch 4 is the 5th epoch


def test_history_columns_and_valid_history():
    state = TrainingState(
        history=[
            {"epoch": 0, "train_loss": 0.9, "epoch_seconds": 1.0, "evaluated": False},
            {"epoch": 1, "train_loss": 0.7, "epoch_seconds": 1.1, "evaluated": True,
             "recall@20": 0.2, "ndcg@20": 0.1, "eval_seconds": 0.5},
        ]
    )  # fmt: skip
    assert state.column("train_loss") == [0.9, 0.7]
    assert state.column("eval_seconds") == [0.5]
    assert state.valid_history() == [{"epoch": 1, "recall@20": 0.2, "ndcg@20": 0.1}]
    assert TrainingState.from_dict(state.to_dict()) == state
