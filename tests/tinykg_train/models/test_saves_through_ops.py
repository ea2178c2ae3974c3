"""Models with `saves_through_ops` train without `compress_saved_tensors`' hooks (the trainer then
enters `through_ops_only`): every activation their steps save goes through an op of
`tinykg_train.compress.ops`, so the step stores the same bytes, per module, as under the hooks, and
computes the same loss and the same gradients, bit for bit (the same rounding draws in the same
order). Whole-graph CF steps, KGAT's KG step, and the sampled local path."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from kg_data import CKG, BPRBatches, KGBatches
from tinykg_train.compress import ActivationMeter, compress_saved_tensors, stack, through_ops_only
from tinykg_train.models import MODELS, build_model

FLAGGED = sorted(name for name, cls in MODELS.items() if cls.saves_through_ops)
SAMPLED = [name for name in ("kgat", "kgin", "lightgcn", "kgcn") if name in FLAGGED]


def test_every_built_in_model_saves_through_ops():
    assert sorted(["bprmf", "kgat", "kgcn", "kgin", "lightgcn"]) == FLAGGED


def one_step(model, compute, scope):
    """Loss, gradients and bytes held per module of one step run inside `scope(model)`."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)  # the rounding draws (and dropout) of both runs
    with scope(model), ActivationMeter(model) as meter:
        loss = compute()
    held = meter.by_module()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, held


def with_hooks(model):
    return compress_saved_tensors(model.compression, model)


def assert_same_step(model, compute):
    loss, grads, held = one_step(model, compute, with_hooks)
    ops_loss, ops_grads, ops_held = one_step(model, compute, through_ops_only)
    assert held and sum(held.values()) > 0
    assert ops_held == held  # nothing saved outside the ops' own compression
    assert torch.equal(ops_loss, loss)
    assert ops_grads.keys() == grads.keys() and grads
    for name, grad in grads.items():
        assert torch.equal(ops_grads[name], grad), name


def make_model(name, dataset, make_config):
    torch.manual_seed(0)
    model = build_model(name, dataset, make_config(model=name, bits=2, dropout=0.1))
    model.train()
    model.on_epoch_start(0)
    return model


@pytest.mark.parametrize("name", FLAGGED)
def test_a_whole_graph_step_stores_and_computes_the_same_without_the_hooks(
    name, tiny_dataset, make_config
):
    model = make_model(name, tiny_dataset, make_config)
    batch = next(iter(BPRBatches(tiny_dataset, 128, seed=0).epoch(0)))
    assert_same_step(model, lambda: model.loss(*batch))
    if model.has_kg_phase:
        kg_batch = next(iter(KGBatches(tiny_dataset, 128, seed=0).epoch(0)))
        assert_same_step(model, lambda: model.kg_loss(*kg_batch))


@pytest.mark.parametrize("name", SAMPLED)
def test_a_sampled_step_stores_and_computes_the_same_without_the_hooks(
    name, tiny_dataset, make_config
):
    model = make_model(name, tiny_dataset, make_config)
    batch = next(iter(BPRBatches(tiny_dataset, 128, seed=0).epoch(0)))
    users, pos, neg = (t.numpy() for t in batch)
    sampler = model.step_sampler(CKG.from_dataset(tiny_dataset), (3, 3))
    graph = sampler.sample(users, pos, neg, np.random.default_rng(0))
    assert_same_step(model, lambda: model.local_loss(*batch, graph))


class StrayLightGCN(MODELS["lightgcn"]):
    """A user's subclass whose loss adds a plain torch op that saves an activation (exp saves its
    output): the flag it inherits is wrong for it."""

    def loss(self, users, pos_items, neg_items):
        stray = torch.exp(self.embedding[:300] * 1.0).sum()
        return super().loss(users, pos_items, neg_items) + 0.0 * stray


def test_a_measured_step_that_saves_outside_the_ops_turns_the_flag_off(tiny_dataset, make_config):
    torch.manual_seed(0)
    model = StrayLightGCN(tiny_dataset, make_config(model="lightgcn", bits=2))
    batch = next(iter(BPRBatches(tiny_dataset, 128, seed=0).epoch(0)))
    with through_ops_only(model):  # unmeasured: nothing sees the stray save
        model.loss(*batch).backward()
    assert model.saves_through_ops
    with pytest.warns(RuntimeWarning, match=r"StrayLightGCN saved 1 activation\(s\) outside"):
        with through_ops_only(model), ActivationMeter(model):
            loss = model.loss(*batch)
        loss.backward()
    assert model.saves_through_ops is False and StrayLightGCN.saves_through_ops is True


def test_through_ops_only_installs_no_saved_tensor_hooks(monkeypatch, tiny_dataset, make_config):
    model = make_model("lightgcn", tiny_dataset, make_config)
    packed = []
    monkeypatch.setattr(stack, "_pack", lambda t: packed.append(t) or t.detach())
    x = torch.randn(300, requires_grad=True)
    with through_ops_only(model):
        assert stack.active()  # the ops' compression cache is on
        x.exp().sum().backward()
    assert packed == []
    with with_hooks(model):
        x.exp().sum().backward()
    assert packed


MODES = {
    "whole": {},
    "sampled": {"sampler": "neighbor", "fanouts": [3, 3]},
    "offloaded": {"sampler": "neighbor", "fanouts": [3, 3], "offload_embeddings": True},
    "partitioned": {"partitions": 2},
}


def trained_epoch(data, out, model_name, mode, monkeypatch, hooks: bool):
    """One trainer epoch (two CF and, for KGAT, two KG steps) of a fresh seeded session: its loss
    and the bytes its first CF step held, per module."""
    from tinykg_train.config import TrainConfig
    from tinykg_train.epoch import train_epoch
    from tinykg_train.session import open_session

    with monkeypatch.context() as patch:
        if hooks:
            patch.setattr(MODELS[model_name], "saves_through_ops", False)
        config = TrainConfig.for_model(
            model_name, data=str(data), out=str(out), bits=2, embed_dim=8, n_layers=2,
            batch_size=64, kg_batch_size=64, max_batches_per_epoch=2, device="cpu", seed=3,
            **MODES[mode],
        )  # fmt: skip
        session = open_session(config, torch.device("cpu"))
        with warnings.catch_warnings():
            warnings.filterwarnings(  # no stray save in a built-in model
                "error", message=".*outside tinykg_train.compress.ops", category=RuntimeWarning
            )
            row = train_epoch(session, 0)
        assert session.model.saves_through_ops is not hooks
    return row["train_loss"], row.get("kg_loss"), dict(session.state.activation_by_module)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("model_name", ["kgat", "lightgcn"])
def test_the_trainers_modes_train_the_same_without_the_hooks(
    tiny_dataset_dir, tmp_path, monkeypatch, model_name, mode
):
    with_hooks_run = trained_epoch(
        tiny_dataset_dir, tmp_path / "hooks", model_name, mode, monkeypatch, hooks=True
    )
    ops_run = trained_epoch(
        tiny_dataset_dir, tmp_path / "ops", model_name, mode, monkeypatch, hooks=False
    )
    assert with_hooks_run[2] and sum(with_hooks_run[2].values()) > 0
    assert ops_run == with_hooks_run  # the same losses, bit for bit, and the same bytes held
