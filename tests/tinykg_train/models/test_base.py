"""The Recommender base: scoring cache, eval-mode scoring, KG phase absence, compression switch."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tinykg_train.errors import TinyKGError
from tinykg_train.models import build_model


@pytest.fixture
def kgin(tiny_dataset, make_config):
    torch.manual_seed(0)
    return build_model("kgin", tiny_dataset, make_config(model="kgin", dropout=0.5))


def test_scores_are_computed_without_dropout_even_from_train_mode(kgin):
    users = torch.arange(5)
    kgin.train()
    first = kgin.score_users(users)  # prepares lazily, in eval mode
    assert kgin.training
    kgin.clear_scoring_cache()
    torch.testing.assert_close(kgin.score_users(users), first)
    kgin.eval()
    kgin.prepare_scoring()
    torch.testing.assert_close(kgin.score_users(users), first)


def test_going_back_to_training_drops_the_scoring_cache(kgin):
    kgin.eval()
    kgin.prepare_scoring()
    before = kgin.score_users(torch.arange(3))
    kgin.train()
    with torch.no_grad():
        kgin.user_embedding.mul_(-1)
    kgin.eval()
    assert not torch.allclose(kgin.score_users(torch.arange(3)), before)


def test_models_without_a_kg_phase_refuse_kg_loss(tiny_dataset, make_config):
    model = build_model("lightgcn", tiny_dataset, make_config(model="lightgcn"))
    assert not model.has_kg_phase
    with pytest.raises(TinyKGError, match="LightGCN has no KG phase"):
        model.kg_loss(*(torch.zeros(2, dtype=torch.long) for _ in range(4)))


def test_set_compression_reaches_every_layer(kgin):
    config = dataclasses.replace(kgin.compression, bits=4)
    kgin.set_compression(config)
    assert kgin.compression is config
    assert all(layer.compression is config for layer in kgin.layers)


def test_set_compression_reaches_the_compress_modules_wrappers_inside_a_model(kgin):
    from tinykg_train.compress import modules as cm

    kgin.head = torch.nn.Sequential(
        cm.Linear(4, 4, config=kgin.compression), cm.ReLU(config=kgin.compression)
    )
    kgin.head.append(cm.Dropout(0.5, config=kgin.compression))
    config = dataclasses.replace(kgin.compression, bits=8)
    kgin.set_compression(config)
    wrappers = [m for m in kgin.head.modules() if isinstance(m, cm.CompressedModule)]
    assert len(wrappers) == 3 and all(w.compression is config for w in wrappers)


def test_set_compression_of_one_layer_leaves_the_rest(kgin):
    run, layer_config = kgin.compression, dataclasses.replace(kgin.compression, bits=8)
    kgin.set_compression(layer_config, kgin.layers[0])
    assert kgin.layers[0].compression is layer_config
    assert kgin.compression is run and all(layer.compression is run for layer in kgin.layers[1:])
    with pytest.raises(TinyKGError, match="Linear is not a part of this KGIN"):
        kgin.set_compression(layer_config, torch.nn.Linear(2, 2))
