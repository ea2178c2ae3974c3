"""open_session: one CompressionConfig object per run, shared by the model, its layers and the hooks."""

from __future__ import annotations

import dataclasses

import torch

import tinykg_train.compress as compress
from tinykg_train.compress.modules import CompressedModule
from tinykg_train.config import TrainConfig
from tinykg_train.epoch import train_epoch
from tinykg_train.session import open_session


def small_config(data, out, **settings) -> TrainConfig:
    return TrainConfig.for_model(
        "kgat", data=str(data), out=str(out), bits=2, embed_dim=8, n_layers=2, batch_size=64,
        kg_batch_size=64, max_batches_per_epoch=2, device="cpu", **settings,
    )  # fmt: skip


def test_the_model_its_layers_and_the_hooks_use_the_identical_compression_object(
    tiny_dataset_dir, tmp_path, monkeypatch
):
    session = open_session(small_config(tiny_dataset_dir, tmp_path / "run"), torch.device("cpu"))
    model = session.model
    assert session.compression is model.compression
    holders = [m for m in model.modules() if isinstance(m, CompressedModule)]
    assert len(holders) == 1 + 2  # the model and its two layers
    assert all(m.compression is model.compression for m in holders)

    given, scoped = [], []
    real, real_scope = compress.compress_saved_tensors, compress.through_ops_only

    def recording(config, model=None):
        given.append(config)
        return real(config, model)

    def recording_scope(model):
        scoped.append(model)
        return real_scope(model)

    monkeypatch.setattr(compress, "compress_saved_tensors", recording)
    monkeypatch.setattr(compress, "through_ops_only", recording_scope)
    train_epoch(session, 0)  # KGAT saves through its ops: its steps need no hooks
    assert given == [] and scoped == [model] * 4  # two CF and two KG steps, each its own block
    monkeypatch.setattr(type(model), "saves_through_ops", False)
    train_epoch(session, 1)
    assert len(given) == 4  # the hooks, given the model's own config
    assert all(config is model.compression for config in given)

    wider = dataclasses.replace(model.compression, bits=4)
    model.set_compression(wider)  # the one way to change it: the hooks follow
    assert session.compression is wider


def test_opening_a_session_writes_nothing(tiny_dataset_dir, tmp_path):
    open_session(small_config(tiny_dataset_dir, tmp_path / "run"), torch.device("cpu"))
    assert not (tmp_path / "run").exists()
