"""Every model on every shared dataset (skipped without ../shared/data): one int2 training step
with the default sizes, then scores for a chunk of users. Catches what the tiny synthetic set
cannot: relation counts (music: 60 KG relations), isolated entities, items without triples."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kg_data import BPRBatches, KGBatches, KGDataset, ingest
from tinykg_train.compress import compress_saved_tensors
from tinykg_train.config import TrainConfig
from tinykg_train.models import MODELS, build_model

pytestmark = pytest.mark.realdata

DATASETS = ("lfm1m-kgat", "music-kgcn", "ml-100k-recbole")


@pytest.fixture(scope="module")
def datasets(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, KGDataset]:
    out = tmp_path_factory.mktemp("realdata")
    return {
        name: KGDataset.open(ingest(shared_data / name, out / name, progress=False).path)
        for name in DATASETS
    }


@pytest.mark.parametrize("dataset_name", DATASETS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_int2_step_and_scores(datasets, dataset_name, name):
    dataset = datasets[dataset_name]
    torch.manual_seed(0)
    layers = 1 if name == "kgcn" else 3
    model = build_model(name, dataset, TrainConfig(model=name, bits=2, n_layers=layers))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    model.on_epoch_start(0)
    steps = [(BPRBatches(dataset, 1024, seed=0), model.loss)]
    if model.has_kg_phase:
        steps.append((KGBatches(dataset, 1024, seed=0), model.kg_loss))
    for batches, loss_fn in steps:
        optimizer.zero_grad()
        with compress_saved_tensors(model.compression):
            loss = loss_fn(*next(iter(batches.epoch(0))))
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
    model.eval()
    model.prepare_scoring()
    scores = model.score_users(torch.arange(64))
    assert scores.shape == (64, dataset.n_items)
    assert torch.isfinite(scores).all()
