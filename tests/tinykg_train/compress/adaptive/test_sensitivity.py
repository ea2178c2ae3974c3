"""compress.adaptive.sensitivity: the exact pass is the FP32 gradient, a site's measured error grows
as its width shrinks, and measuring leaves the run's random stream untouched."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tinykg_train.compress import CompressionConfig
from tinykg_train.compress.adaptive.sensitivity import gradient, measure
from tinykg_train.models import build_model


def model_and_batch(dataset, make_config, name="kgat", dropout=0.1):
    torch.manual_seed(0)
    model = build_model(name, dataset, make_config(model=name, bits=2, dropout=dropout))
    batch = (torch.arange(32), torch.arange(32), torch.arange(32, 64))
    return model, batch


def test_the_exact_pass_gives_the_fp32_gradient(tiny_dataset, make_config):
    model, batch = model_and_batch(tiny_dataset, make_config, dropout=0.0)
    state = torch.get_rng_state()
    sensitivity = measure(model, model.loss, batch, model.compression)
    assert len(sensitivity.sites) > 0 and sensitivity.held_bytes > 0
    # the exact pass's gradient, rebuilt the way `measure` runs it, against plain FP32 autograd
    from tinykg_train.compress import compress_saved_tensors
    from tinykg_train.compress.adaptive.sites import applying

    torch.set_rng_state(state)
    model.zero_grad()
    with compress_saved_tensors(model.compression), applying(None, all_exact=True):
        model.loss(*batch).backward()
    exact = gradient(model)
    model.set_compression(CompressionConfig(bits=32))
    torch.set_rng_state(state)
    model.zero_grad()
    model.loss(*batch).backward()
    torch.testing.assert_close(exact, gradient(model), rtol=1e-4, atol=1e-6)


def test_narrower_probes_measure_larger_errors_and_dropout_adds_none(tiny_dataset, make_config):
    model, batch = model_and_batch(tiny_dataset, make_config)  # dropout on: same masks every pass
    errors = {
        bits: measure(model, model.loss, batch, model.compression, probe_bits=bits).errors
        for bits in (1, 4, 8)
    }
    for site in range(len(errors[1])):
        assert errors[1][site] > errors[4][site] > errors[8][site] >= 0
    assert max(errors[8]) < 1e-3  # 8-bit rounding alone: no dropout noise between the passes


def test_measuring_draws_nothing_from_the_runs_random_stream(tiny_dataset, make_config):
    model, batch = model_and_batch(tiny_dataset, make_config, name="kgin")
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    measure(model, model.loss, batch, model.compression)
    torch.testing.assert_close(torch.rand(3), expected)
    assert all(p.grad is None for p in model.parameters())


def test_over_many_draws_the_mean_gradient_is_close_unbiased_rounding(tiny_dataset, make_config):
    """Stochastic rounding is unbiased: the draws' mean gradient errs about error / draws."""
    model, batch = model_and_batch(tiny_dataset, make_config, dropout=0.0)
    sensitivity = measure(model, model.loss, batch, model.compression, probe_bits=1, draws=16)
    for error, bias in zip(sensitivity.errors, sensitivity.bias, strict=True):
        assert bias < 0.25 * error  # 1/16 expected
    nearest = dataclasses.replace(model.compression, stochastic=False)  # the control: biased
    model.set_compression(nearest)
    sensitivity = measure(model, model.loss, batch, nearest, probe_bits=1, draws=16)
    for error, bias in zip(sensitivity.errors, sensitivity.bias, strict=True):
        assert bias > 0.9 * error


def test_per_parameter_errors_add_up_to_the_whole_gradients(tiny_dataset, make_config):
    """Each site's per-parameter relative errors, weighted by the parameters' squared gradient
    norms, are its error over the whole gradient; parameters without a gradient are not listed."""
    model, batch = model_and_batch(tiny_dataset, make_config, dropout=0.0)
    sensitivity = measure(model, model.loss, batch, model.compression, probe_bits=1, draws=2)
    model.set_compression(CompressionConfig(bits=32))
    model.zero_grad()
    model.loss(*batch).backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    norms = {n: float(g.pow(2).sum()) for n, g in grads.items()}
    total = sum(norms.values())
    listed = {n for n, v in norms.items() if v > 0}
    assert "relation_embedding" not in listed  # KGAT's CF loss: no gradient for the KG's relations
    for error, by_parameter in zip(sensitivity.errors, sensitivity.by_parameter, strict=True):
        assert set(by_parameter) == listed
        weighted = sum(by_parameter[n] * norms[n] for n in listed) / total
        assert weighted == pytest.approx(error, rel=1e-3)
    pairs = zip(sensitivity.errors, sensitivity.by_parameter, strict=True)
    assert any(max(by_parameter.values()) > 10 * error for error, by_parameter in pairs)
