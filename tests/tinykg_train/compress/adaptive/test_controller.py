"""compress.adaptive.controller: the measuring schedule, the plans applied to a phase's steps, and
plans that survive a weights_only checkpoint."""

from __future__ import annotations

import io

import torch

from tinykg_train.compress import ActivationMeter, compress_saved_tensors
from tinykg_train.compress.adaptive.controller import AdaptivePrecision
from tinykg_train.models import build_model


def test_schedule_measures_first_then_every_adapt_every_epochs(tiny_dataset, make_config):
    model = build_model("lightgcn", tiny_dataset, make_config(model="lightgcn", bits=2))
    precision = AdaptivePrecision(model.compression, average_bits=2.5, adapt_every=3)
    assert precision.due("cf", 0)
    batch = (torch.arange(16), torch.arange(16), torch.arange(16, 32))
    precision.adapt("cf", 0, model, model.loss, batch)
    assert [e for e in range(10) if precision.due("cf", e)] == [3, 6, 9]
    assert precision.due("kg", 4)  # a phase without a plan yet
    once = AdaptivePrecision(model.compression, average_bits=2.5, adapt_every=0)
    once.adapt("cf", 0, model, model.loss, batch)
    assert not any(once.due("cf", e) for e in range(10))


def test_the_chosen_widths_are_what_the_steps_hold_and_survive_a_checkpoint(
    tiny_dataset, make_config
):
    torch.manual_seed(0)
    model = build_model("kgin", tiny_dataset, make_config(model="kgin", bits=2, dropout=0.0))
    precision = AdaptivePrecision(model.compression, average_bits=2.0, adapt_every=0)
    batch = (torch.arange(16), torch.arange(16), torch.arange(16, 32))
    plan = precision.adapt("cf", 0, model, model.loss, batch)
    assert plan.choice.average_bits(plan.sites) <= 2.0
    report = precision.report()["phases"]["cf"]
    assert sum(site["bytes"] for site in report["sites"]) == plan.choice.bytes

    def held(controller) -> int:
        torch.manual_seed(1)
        with (
            compress_saved_tensors(model.compression),
            controller.applying("cf"),
            ActivationMeter(model) as meter,
        ):
            loss = model.loss(*batch)
        loss.backward()
        return meter.total_bytes

    buffer = io.BytesIO()
    torch.save(precision.state_dict(), buffer)
    buffer.seek(0)
    restored = AdaptivePrecision(model.compression, average_bits=2.0, adapt_every=0)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert restored.plans["cf"].choice.widths == plan.choice.widths
    assert (
        held(restored)
        == held(precision)
        < held(AdaptivePrecision(model.compression, average_bits=2, adapt_every=0))
    )
