"""The model contract, for every model of the registry: build, score, train, compress exactly."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kg_data import BPRBatches
from tinykg_train.compress import ActivationMeter, compress_saved_tensors
from tinykg_train.errors import ConfigError
from tinykg_train.models import MODELS, Recommender, build_model

ALL = sorted(MODELS)
# BPR-MF saves only rows of its tables (stored as their indices) and the loss margins (kept
# exact): at INT2 nothing it keeps for backward is rounded
EXACT_AT_INT2 = {"bprmf"}


def first_batch(dataset, size: int = 128):
    return next(iter(BPRBatches(dataset, size, seed=0).epoch(0)))


@pytest.mark.parametrize("name", ALL)
def test_builds_and_scores_every_item(name, tiny_dataset, make_config):
    torch.manual_seed(0)
    model = build_model(name, tiny_dataset, make_config(model=name))
    assert isinstance(model, Recommender)
    model.eval()
    model.prepare_scoring()
    users = torch.tensor([0, 5, tiny_dataset.n_users - 1])
    scores = model.score_users(users)
    assert scores.shape == (3, tiny_dataset.n_items)
    assert torch.isfinite(scores).all()
    assert scores.std() > 0  # not a constant
    torch.testing.assert_close(model.score_users(users[1:2]), scores[1:2])


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("bits", [32, 2])
def test_training_lowers_the_loss(name, bits, tiny_dataset, make_config, train):
    torch.manual_seed(0)
    model = build_model(name, tiny_dataset, make_config(model=name, bits=bits))
    losses = train(model, tiny_dataset, steps=150)
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert all(torch.isfinite(torch.tensor(losses)))
    assert last < 0.7 * first, (first, last)


# Without dropout: the compressed ops draw their rounding noise from torch's generator, so with
# dropout on, the masks of int2 and fp32 runs differ after the first compressed save.
NO_DROPOUT = {"dropout": 0.0, "extra": {"edge_dropout": 0.0}}


def loss_and_gradient(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    model.zero_grad()
    with compress_saved_tensors(model.compression):
        loss = model.loss(*batch)
    loss.backward()
    grads = [p.grad.flatten() for p in model.parameters() if p.grad is not None]
    return loss.detach(), torch.cat(grads)


def fp32_and_int2(name, dataset, make_config):
    torch.manual_seed(0)
    fp32 = build_model(name, dataset, make_config(model=name, bits=32, **NO_DROPOUT))
    int2 = build_model(name, dataset, make_config(model=name, bits=2, **NO_DROPOUT))
    int2.load_state_dict(fp32.state_dict())
    fp32.on_epoch_start(0)
    int2.on_epoch_start(0)
    return fp32, int2


@pytest.mark.parametrize("name", ALL)
def test_int2_forward_equals_fp32(name, tiny_dataset, make_config):
    fp32, int2 = fp32_and_int2(name, tiny_dataset, make_config)
    batch = first_batch(tiny_dataset)
    loss32, g32 = loss_and_gradient(fp32, batch)
    loss2, g2 = loss_and_gradient(int2, batch)
    assert torch.equal(loss32, loss2)
    if name in EXACT_AT_INT2:
        assert torch.equal(g32, g2)
    else:
        assert not torch.equal(g32, g2)  # the backward really read compressed activations
    if fp32.has_kg_phase:
        heads, relations, tails = tiny_dataset.triples_array()[:64].T
        kg_batch = [torch.from_numpy(a.copy()) for a in (heads, relations, tails, tails[::-1])]
        torch.manual_seed(2)
        kg32 = fp32.kg_loss(*kg_batch)
        torch.manual_seed(2)
        with compress_saved_tensors(int2.compression):
            kg2 = int2.kg_loss(*kg_batch)
        assert torch.equal(kg32, kg2)


@pytest.mark.parametrize("name", ALL)
def test_int2_gradients_average_to_fp32(name, tiny_dataset, make_config):
    """Unbiased rounding: the mean of 16 int2 gradients is much closer to the fp32 one than a
    single int2 gradient is. Control: round-to-nearest (biased) does not average out."""
    fp32, int2 = fp32_and_int2(name, tiny_dataset, make_config)
    batch = first_batch(tiny_dataset)
    _, exact = loss_and_gradient(fp32, batch)

    def errors(model) -> tuple[float, float]:
        torch.manual_seed(3)
        grads = torch.stack([loss_and_gradient(model, batch)[1] for _ in range(16)])
        single = (grads - exact).norm(dim=1).mean()
        return float(single), float((grads.mean(0) - exact).norm())

    single, averaged = errors(int2)
    if name in EXACT_AT_INT2:
        assert single == 0  # every draw is the FP32 gradient
        return
    assert single > 0
    assert averaged < 0.5 * single, (single, averaged)
    int2.set_compression(dataclasses.replace(int2.compression, stochastic=False))
    single, averaged = errors(int2)
    assert averaged > 0.9 * single, (single, averaged)


@pytest.mark.parametrize("name", ALL)
def test_int2_holds_far_fewer_activation_bytes(name, tiny_dataset, make_config):
    held = {}
    for bits in (32, 2):
        torch.manual_seed(0)
        # score_bits=2: every activation at 2 bits (BPR-MF saves nothing but its scored embeddings)
        config = make_config(model=name, bits=bits, score_bits=2)
        model = build_model(name, tiny_dataset, config)
        with compress_saved_tensors(model.compression), ActivationMeter(model) as meter:
            loss = model.loss(*first_batch(tiny_dataset, 256))  # held: the graph stays alive
        held[bits] = meter.total_bytes
        del loss
    assert held[2] * 5 < held[32], held


@pytest.mark.parametrize("name", ALL)
def test_checkpoints_hold_weights_only(name, tiny_dataset, make_config):
    """Graph tensors are rebuilt from the dataset, so a state_dict is parameters alone."""
    model = build_model(name, tiny_dataset, make_config(model=name))
    parameters = {key for key, _ in model.named_parameters()}
    assert set(model.state_dict()) == parameters


def test_unknown_model_is_a_config_error(tiny_dataset, make_config):
    with pytest.raises(ConfigError, match="unknown model 'transe'"):
        build_model("transe", tiny_dataset, make_config())


def test_extra_keys_are_checked_and_applied(tiny_dataset, make_config):
    with pytest.raises(ConfigError, match="unknown model setting.*layer_dim\\b"):
        build_model("kgat", tiny_dataset, make_config(extra={"layer_dim": [8, 8]}))
    # A knob of another model is accepted (sweeps share one `extra`) and ignored.
    model = build_model("bprmf", tiny_dataset, make_config(extra={"edge_dropout": 0.2}))
    assert model.extra == {}
    kgin = build_model("kgin", tiny_dataset, make_config(model="kgin", extra={"edge_dropout": 0.2}))
    assert kgin.extra["edge_dropout"] == 0.2
    assert kgin.extra["independence"] == "distance"  # the default of the unset knob


def test_builds_from_a_dataset_dir_path(tiny_dataset_dir, make_config):
    model = build_model("bprmf", str(tiny_dataset_dir), make_config(model="bprmf"))
    assert model.n_items > 0


@pytest.mark.parametrize("name", ALL)
def test_trains_end_to_end_through_the_trainer(name, tiny_dataset_dir, make_config, tmp_path):
    """`trainer.train` calls exactly the contract (epoch hook, CF and KG phases, scoring)."""
    from tinykg_train.trainer import train

    config = make_config(
        model=name,
        bits=2,
        data=str(tiny_dataset_dir),
        out=str(tmp_path / name),
        epochs=2,
        batch_size=512,
        kg_batch_size=512,
        max_batches_per_epoch=3,
        device="cpu",
    )
    result = train(config)
    assert (tmp_path / name / "metrics.json").is_file()
    assert 0 <= result["recall@20"] <= 1
    assert result["activation_bytes"] > 0
    assert (name == "kgat") == ("kg_loss" in result)


@pytest.mark.cuda
@pytest.mark.parametrize("name", ALL)
def test_cuda_matches_cpu(name, tiny_dataset, make_config):
    """`.to("cuda")` moves every graph tensor; the loss and the scores agree with the CPU ones."""
    torch.manual_seed(0)
    cpu = build_model(name, tiny_dataset, make_config(model=name, bits=2, **NO_DROPOUT))
    gpu = build_model(name, tiny_dataset, make_config(model=name, bits=2, **NO_DROPOUT))
    gpu.load_state_dict(cpu.state_dict())
    gpu = gpu.to("cuda")
    cpu.on_epoch_start(0)
    gpu.on_epoch_start(0)
    batch = first_batch(tiny_dataset)
    with compress_saved_tensors(cpu.compression):
        expected = cpu.loss(*batch)
    with compress_saved_tensors(gpu.compression):
        loss = gpu.loss(*(t.cuda() for t in batch))
    loss.backward()
    torch.testing.assert_close(loss.cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
    for model in (cpu, gpu):
        model.eval()
        model.prepare_scoring()
    users = torch.arange(8)
    torch.testing.assert_close(
        gpu.score_users(users.cuda()).cpu(), cpu.score_users(users), rtol=1e-4, atol=1e-5
    )
