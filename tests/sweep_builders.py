"""Model builders for the sweep and data-parallel training tests, named as
`model_builder: tests.sweep_builders:<name>` (or `--model-builder` of pipelines.train).

Ray workers import them from the working directory (the repository root), so a test can make one
chosen trial fail the way real trials do while the others train the real models.
"""

from __future__ import annotations

import os
import signal


def crash_seed_1(name, dataset, config):
    """The real model, except that the trial with seed 1 raises while building it."""
    if config.seed == 1:
        raise RuntimeError("simulated crash while building the model (seed 1)")
    from tinykg_train.models import build_model

    return build_model(name, dataset, config)


def valid_items_last_for_seed_1(name, dataset, config):
    """The real model; for seed 1 its scores put every user's valid items last (valid Recall@20 = 0),
    so ASHA stops that trial at its first rung when a normal trial got there first."""
    import torch

    from tinykg_train.models import build_model

    model = build_model(name, dataset, config)
    if config.seed != 1:
        return model
    valid = torch.zeros(dataset.n_users, dataset.n_items, dtype=torch.bool)
    pairs = torch.as_tensor(dataset.pairs("valid"))
    valid[pairs[:, 0], pairs[:, 1]] = True
    score_users = model.score_users

    def scores_with_valid_items_last(users):
        scores = score_users(users)
        return scores.masked_fill(valid[users.cpu()].to(scores.device), -1e9)

    model.score_users = scores_with_valid_items_last
    return model


def valid_items_last_seed_1_kill_seed_2(name, dataset, config):
    """Like `valid_items_last_for_seed_1`, and the trial with seed 2 loses its process (SIGKILL, as
    the OOM killer does)."""
    if config.seed == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return valid_items_last_for_seed_1(name, dataset, config)


def slow_seed_1(name, dataset, config):
    """The real model; for seed 1 every training step takes at least a second, so a test can
    interrupt that trial between its epochs."""
    import time

    from tinykg_train.models import build_model

    model = build_model(name, dataset, config)
    if config.seed == 1:
        loss = model.loss

        def slow_loss(*batch):
            time.sleep(1.0)
            return loss(*batch)

        model.loss = slow_loss
    return model


def slow_steps(name, dataset, config):
    """The real model, each training step at least 0.3 s long (same numbers), so a test can kill a
    data-parallel worker in the middle of an epoch."""
    import time

    from tinykg_train.models import build_model

    model = build_model(name, dataset, config)
    loss = model.loss

    def slow_loss(*batch):
        time.sleep(0.3)
        return loss(*batch)

    model.loss = slow_loss
    return model
