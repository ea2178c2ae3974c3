"""open_session: one CompressionConfig object per run, shared by the model, its layers and the hooks."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

import tinykg_train.compress as compress
from tests.widened import int_array_dtypes, widened, widened_items
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


def held_index_dtypes(session) -> set[np.dtype]:
    """The dtypes of the integer arrays the session's loaders and evaluator keep for the run."""
    loaders = (session.cf_batches, session.kg_batches)
    held = {dtype for loader in loaders for dtype in int_array_dtypes(loader).values()}
    tables = session.evaluator.split_items.values()
    return held | {array.dtype for table in tables for array in (table.indptr, table.items)}


def test_the_loaders_and_evaluator_hold_int32_arrays_and_train_as_int64_ones_do(
    tiny_dataset_dir, tmp_path
):
    narrow = open_session(small_config(tiny_dataset_dir, tmp_path / "a"), torch.device("cpu"))
    assert held_index_dtypes(narrow) == {np.dtype(np.int32)}
    narrow_row = train_epoch(narrow, 0)
    # opened after the first session's epoch, so both epochs start from the same global RNG state
    wide = open_session(small_config(tiny_dataset_dir, tmp_path / "b"), torch.device("cpu"))
    wide.cf_batches, wide.kg_batches = widened(wide.cf_batches), widened(wide.kg_batches)
    wide.evaluator.split_items = widened_items(wide.evaluator.split_items)
    assert held_index_dtypes(wide) == {np.dtype(np.int64)}
    wide_row = train_epoch(wide, 0)
    losses = ("train_loss", "kg_loss")
    assert [narrow_row[name] for name in losses] == [wide_row[name] for name in losses]
    narrow_weights, wide_weights = narrow.model.state_dict(), wide.model.state_dict()
    assert all(torch.equal(narrow_weights[name], wide_weights[name]) for name in narrow_weights)
    assert narrow.evaluator.evaluate(narrow.model, "valid") == wide.evaluator.evaluate(
        wide.model, "valid"
    )


def test_dense_adam_steps_with_one_table_sized_temporary_and_the_one_tensor_step_s_bits():
    """The session's Adam (float32 state) takes torch's multi-tensor step on the CPU too: one
    [rows, dim] temporary for the denominator, not two, and the same parameters to the bit."""
    from tinykg_train.memory import allocation_peak
    from tinykg_train.session import dense_optimizer

    torch.manual_seed(0)
    table = torch.nn.Parameter(torch.randn(1 << 16, 32))  # 8 MiB
    reference = torch.nn.Parameter(table.detach().clone())
    config = TrainConfig(lr=1e-2)
    optimizer = dense_optimizer(None, [table], config)
    one_tensor = torch.optim.Adam([reference], lr=1e-2, foreach=False)
    peaks = []
    for step in range(3):
        gradient = torch.randn_like(table)
        table.grad, reference.grad = gradient.clone(), gradient.clone()
        with allocation_peak(torch.device("cpu")) as window:
            optimizer.step()
        one_tensor.step()
        peaks.append(window.peak_bytes)
        assert torch.equal(table, reference), step
    table_bytes = table.numel() * table.element_size()
    assert max(peaks[1:]) < 1.5 * table_bytes  # one temporary (the first step also makes state)
