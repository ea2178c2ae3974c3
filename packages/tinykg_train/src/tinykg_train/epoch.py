"""One training epoch: the CF phase (BPR), the KG phase for models that have one, and validation.

Compressed activations (`bits` < 32) apply to every training step through
`compress_saved_tensors`; the bytes one step holds for backward are measured on the first CF step of
each epoch with an `ActivationMeter` entered inside the compression hooks (so it sees what is
actually stored).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from tqdm.auto import tqdm

from tinykg_train.allocator import release_freed_memory
from tinykg_train.best_weights import kept_on_disk, save_best_weights
from tinykg_train.errors import TinyKGError
from tinykg_train.memory_breakdown import (
    epoch_start_measured,
    evaluate_measured,
    start_step_probe,
)
from tinykg_train.precision import adapt_if_due
from tinykg_train.session import Session


def limit_batches(batches: Iterable, max_batches: int | None) -> Iterator:
    """The first `max_batches` batches (all of them for None)."""
    for index, batch in enumerate(batches):
        if max_batches is not None and index >= max_batches:
            return
        yield batch


def count_batches(batches: Any, max_batches: int | None) -> int:
    return len(batches) if max_batches is None else min(len(batches), max_batches)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so wall-clock timings cover it (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def saving(session: Session, phase: str) -> contextlib.ExitStack:
    """How one step of `phase` stores what autograd saves: compressed at the run's widths (each
    site's own under `bits: auto`), nothing quantized in a phase of `exact_phases`. A fresh
    context per step (an ExitStack is not reusable)."""
    from tinykg_train.compress import compress_saved_tensors, through_ops_only
    from tinykg_train.compress.adaptive import sites

    stack = contextlib.ExitStack()
    if session.config.compressed and getattr(session.model, "saves_through_ops", False):
        stack.enter_context(through_ops_only(session.model))  # its ops compress what they save
    elif session.config.compressed:
        stack.enter_context(compress_saved_tensors(session.compression, session.model))
    if session.precision is not None:  # `bits: auto`: the phase's chosen widths
        stack.enter_context(session.precision.applying(phase))
    if phase in session.config.exact_phases:  # every quantized save of the phase kept exact
        stack.enter_context(sites.applying(None, all_exact=True))
    return stack


def run_phase(
    session: Session, epoch: int, phase: str, batches: Any, loss_fn: Callable, measure: bool
) -> tuple[float, int | None, dict[str, int]]:
    """One pass of optimizer steps; returns (mean loss, activation bytes, bytes by module).

    With `measure`, the first step's forward runs under an `ActivationMeter`: the bytes autograd holds
    for backward in one real training step (after compression).
    """
    from tinykg_train.compress import ActivationMeter

    config, model, optimizer = session.config, session.model, session.optimizer
    if session.release_heap:  # what the work before freed, in pieces these steps may not fit
        release_freed_memory()
    total = torch.zeros((), dtype=torch.float64, device=session.device)
    steps, activation_bytes, by_module = 0, None, {}
    progress = tqdm(
        limit_batches(batches.epoch(epoch), config.max_batches_per_epoch),
        total=count_batches(batches, config.max_batches_per_epoch),
        desc=f"epoch {epoch} {phase}",
        leave=False,
        disable=None,  # shown on a terminal, silent in logs and pipes
    )
    for batch in progress:
        batch = [tensor.to(session.device, non_blocking=True) for tensor in batch]
        optimizer.zero_grad(set_to_none=True)
        probe = start_step_probe(session, phase, epoch, steps, progress.total)  # once per run
        step_loss = loss_fn if probe is None else probe.forward(loss_fn)
        compressing = saving(session, phase)
        if probe is not None:
            compressing.push(probe.close_on_error)
        with compressing:
            if measure and steps == 0:
                with ActivationMeter(model) as meter:
                    loss = step_loss(*batch)
                activation_bytes, by_module = int(meter.total_bytes), dict(meter.by_module())
            else:
                loss = step_loss(*batch)
            loss.backward()
        if session.replica is not None:  # data parallel: the whole batch's gradients and loss
            loss = session.replica.average_gradients(model, loss)
        optimizer.step()
        if session.tables is not None:  # SparseAdam on the step's rows of the big tables
            session.tables.step()
        if probe is not None:
            probe.finish()
        total += loss.detach()
        steps += 1
    if session.tables is not None:
        session.tables.end_phase()
    mean = float(total) / max(steps, 1)
    if not math.isfinite(mean):
        raise TinyKGError(
            f"{config.model}: {phase} loss became {mean} in epoch {epoch} (training diverged); lower --lr or raise --l2"
        )
    return mean, activation_bytes, by_module


def train_epoch(session: Session, epoch: int) -> dict[str, Any]:
    """CF phase (and KG phase) of one epoch; the history row without valid metrics."""
    model = session.model
    model.train()
    synchronize(session.device)
    start = time.perf_counter()
    if session.release_heap:  # e.g. the last ranking's blocks (allocator.releases_between_phases)
        release_freed_memory()
    with session.whole_model():
        epoch_start_measured(session, epoch)  # e.g. KGAT's attention refresh: the epoch's cost
    sampled = session.sampled  # sampled training: batches with subgraphs, their own losses
    if sampled is None:
        adapt_if_due(session, "cf", epoch, session.cf_batches, model.loss)
    with sampled.running(epoch) if sampled is not None else contextlib.nullcontext():
        cf_loss, activation_bytes, by_module = run_phase(
            session,
            epoch,
            "cf",
            session.cf_batches if sampled is None else sampled,
            model.loss if sampled is None else sampled.cf_loss,
            measure=True,
        )
    row: dict[str, Any] = {"epoch": epoch, "train_loss": cf_loss}
    if session.kg_batches is not None:
        kg_loss = model.kg_loss if sampled is None else sampled.kg_loss
        if sampled is None:
            adapt_if_due(session, "kg", epoch, session.kg_batches, model.kg_loss)
        row["kg_loss"], _, _ = run_phase(
            session, epoch, "kg", session.kg_batches, kg_loss, measure=False
        )
    session.optimizer.zero_grad(set_to_none=True)  # each step starts without; nothing to hold
    synchronize(session.device)
    row["epoch_seconds"] = time.perf_counter() - start
    if sampled is not None:
        row.update(sampled.epoch_stats())
    row["activation_bytes"] = activation_bytes
    if session.precision is not None:  # `bits: auto`: the widths this epoch's steps used
        row.update(session.precision.average_bits_by_phase())
    session.state.activation_by_module = by_module
    return row


def evaluate_epoch(session: Session, epoch: int, row: dict[str, Any]) -> None:
    """Rank the valid split when due (every `eval_every` epochs and at the last epoch)."""
    config = session.config
    due = (epoch + 1) % config.eval_every == 0 or epoch + 1 == config.epochs
    row["evaluated"] = due
    if not due:
        return
    start = time.perf_counter()
    with session.whole_model():
        valid = evaluate_measured(session, "valid")  # the run's first also measures its memory
        row["eval_seconds"] = time.perf_counter() - start
        row.update(valid)
        on_disk = kept_on_disk(session)
        row["improved"] = session.state.observe(
            epoch, valid, None if on_disk else session.model, config.patience, config.min_epochs
        )
        if row["improved"] and on_disk:
            save_best_weights(session.run, epoch, session.model.state_dict())
