"""`bits: auto` and `memory_budget` in a training run: the controller, prepared before the first
epoch, adapted at its scheduled epochs (see `tinykg_train.compress.adaptive`).

`prepare` runs before the run dir exists: a budget that no width fits raises a ConfigError there,
and nothing is written. It measures every phase on epoch 0's first batch, so the first epoch
starts with its plans; a resumed run keeps the plans of its checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from tinykg_train.compress.adaptive.budget import measure_phase, site_budget, size_text
from tinykg_train.compress.adaptive.controller import AdaptivePrecision
from tinykg_train.config import TrainConfig, parse_size


def build_precision(config: TrainConfig, compression) -> AdaptivePrecision | None:
    if not config.adaptive:
        return None
    return AdaptivePrecision(
        compression, average_bits=config.auto_bits, adapt_every=config.adapt_every
    )


def phases(session) -> Iterator[tuple[str, Any, Callable]]:
    """(name, batches, loss function) of each training phase of the session's model."""
    yield "cf", session.cf_batches, session.model.loss
    if session.kg_batches is not None:
        yield "kg", session.kg_batches, session.model.kg_loss


def first_batch(batches, epoch: int, device: torch.device) -> list[torch.Tensor]:
    """The epoch's first batch (batches are a pure function of seed and epoch: peeking draws
    nothing the epoch will not draw again)."""
    return [t.to(device) for t in next(iter(batches.epoch(epoch)))]


def prepare(session) -> list[str]:
    """Before training: each phase's first plan (and, with a memory budget, the phase's byte budget
    for its sites); lines saying what was chosen and what FP32 would need."""
    precision, config = session.precision, session.config
    if precision is None:
        return []
    if precision.plans:  # resumed: the checkpoint's plans
        return [precision.summary(), "(widths restored from the checkpoint)"]
    lines = []
    model = session.model
    model.train()
    epoch = session.state.next_epoch
    for phase, batches, loss_fn in phases(session):
        batch = first_batch(batches, epoch, session.device)
        probes = precision.measure(model, loss_fn, batch)
        if config.memory_budget is not None:
            budget = parse_size(config.memory_budget, "memory_budget")
            memory = measure_phase(
                model, loss_fn, batch, precision.compression, probes.sites,
                adam_state=config.adam_state,
            )  # fmt: skip
            precision.site_budgets[phase] = site_budget(
                budget, memory, probes.sites, precision.compression
            )
            plan = precision.choose(phase, epoch, probes)
            lines.append(
                f"memory budget {size_text(budget)}, {phase} phase: a step at FP32 would need "
                f"{size_text(memory.fp32_total)} (model state {size_text(memory.model_state)}, "
                f"the step {size_text(memory.fp32_peak)}); with the chosen widths "
                f"{size_text(memory.fixed + plan.choice.bytes)}"
            )
        else:
            precision.choose(phase, epoch, probes)
    lines.insert(0, precision.summary())
    return lines


def adapt_if_due(session, phase: str, epoch: int, batches, loss_fn: Callable) -> None:
    """Measure `phase` again on the epoch's first batch when its schedule says so."""
    precision = session.precision
    if precision is not None and precision.due(phase, epoch):
        batch = first_batch(batches, epoch, session.device)
        precision.adapt(phase, epoch, session.model, loss_fn, batch)
