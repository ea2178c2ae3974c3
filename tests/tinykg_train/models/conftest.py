"""Shared pieces of the model tests: the tiny synthetic dataset opened once, configs, a training loop."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from kg_data import BPRBatches, KGBatches, KGDataset
from tinykg_train.compress import compress_saved_tensors
from tinykg_train.config import TrainConfig


@pytest.fixture(scope="session")
def tiny_dataset(tiny_dataset_dir) -> KGDataset:
    return KGDataset.open(tiny_dataset_dir)


@pytest.fixture
def make_config() -> Callable[..., TrainConfig]:
    """`make_config(model="kgat", bits=2, ...)`: small defaults for fast tests, overridable."""

    def make(**overrides) -> TrainConfig:
        settings = {"embed_dim": 16, "n_layers": 2, "kg_neighbors": 4, "seed": 0, **overrides}
        return TrainConfig(**settings)

    return make


def train_steps(
    model,
    dataset: KGDataset,
    steps: int,
    *,
    lr: float = 1e-2,
    batch_size: int = 256,
    kg: bool = True,
) -> list[float]:
    """Adam on `model.loss` for `steps` CF steps (epochs as the trainer runs them, with the KG phase
    and `on_epoch_start`); compressed saves per the model's config. Returns the CF losses."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    cf = BPRBatches(dataset, batch_size, seed=0)
    kg_batches = KGBatches(dataset, batch_size, seed=0) if kg and model.has_kg_phase else None
    losses: list[float] = []
    epoch = 0
    model.train()
    while len(losses) < steps:
        model.on_epoch_start(epoch)
        phases = [(cf, model.loss, True)]
        if kg_batches is not None:
            phases.append((kg_batches, model.kg_loss, False))
        for batches, loss_fn, record in phases:
            for batch in batches.epoch(epoch):
                if record and len(losses) >= steps:
                    break
                optimizer.zero_grad()
                with compress_saved_tensors(model.compression):
                    loss = loss_fn(*batch)
                loss.backward()
                optimizer.step()
                if record:
                    losses.append(loss.item())
        epoch += 1
    return losses


@pytest.fixture
def train() -> Callable[..., list[float]]:
    return train_steps
