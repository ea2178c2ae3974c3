"""`train(config)`: THE training function, used by `pipelines.train` and by every sweep trial.

One run: Adam on the model's BPR loss (its L2 term inside), then, for models with a KG phase (KGAT),
a TransR pass over the KG triples; evaluation on the valid split every `eval_every` epochs with
early stopping on valid Recall@20 (`patience` evaluations without gain); a checkpoint after every
epoch; at the end the best epoch's weights are ranked on the test split and `metrics.json` is
written. Compressed activations (`bits` < 32) apply to every training step; the bytes one step holds
for backward are measured on the first CF step of each epoch.

Determinism: the run seeds torch, NumPy and Python from `config.seed`; batches are a pure function
of (seed, epoch); the checkpoint holds every RNG state, so a run resumed after a kill -9 reproduces
the uninterrupted run's numbers exactly on CPU.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from tinykg_train.activation_report import write_activation_chart, write_activation_table
from tinykg_train.checkpoint import (
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
    seed_everything,
)
from tinykg_train.config import TrainConfig
from tinykg_train.device import describe_device, resolve_device
from tinykg_train.errors import ConfigError, TinyKGError
from tinykg_train.evaluate import RankingEvaluator
from tinykg_train.memory import cuda_peak_bytes, peak_rss_bytes, reset_cuda_peak
from tinykg_train.run_dir import RunDir, write_json_atomic, write_yaml_atomic
from tinykg_train.tracking import Tracker
from tinykg_train.training_state import STOP_METRIC, TrainingState

# build_model(name, dataset, config) -> Recommender (see tinykg_train.models)
ModelBuilder = Callable[[str, Any, TrainConfig], Any]

# Settings a resumed run may change without invalidating the checkpoint.
RESUMABLE_CHANGES = frozenset({"resume", "epochs", "device", "out", "data", "eval_batch_users"})


@dataclass
class Session:
    """Everything a run works with, built once by `open_session`."""

    config: TrainConfig
    run: RunDir
    device: torch.device
    dataset: Any
    model: Any
    optimizer: torch.optim.Optimizer
    cf_batches: Any
    kg_batches: Any | None
    evaluator: RankingEvaluator
    compression: Any
    state: TrainingState
    resumed_at: int | None = None


def evaluation_ks(config: TrainConfig) -> tuple[int, ...]:
    """The cut-offs evaluated: the configured ones plus 20 (early stopping and the contract need it)."""
    return tuple(sorted({20, *config.eval_ks}))


def check_run_dir(config: TrainConfig) -> RunDir:
    """The run dir; refuse to overwrite an earlier run's checkpoint unless resuming."""
    run = RunDir(config.out)
    if run.checkpoint.exists() and not config.resume:
        raise ConfigError(
            f"{run.path} already holds a checkpoint of an earlier run: pass --resume to continue it or choose another --out"
        )
    return run


def open_session(
    config: TrainConfig,
    run: RunDir,
    device: torch.device,
    model_builder: ModelBuilder | None = None,
) -> Session:
    """Open the dataset, build model/optimizer/batches, and restore the checkpoint when resuming."""
    from kg_data import BPRBatches, KGBatches, KGDataset
    from tinykg_train.compress import CompressionConfig

    if model_builder is None:
        from tinykg_train.models import build_model as model_builder

    dataset = KGDataset.open(config.data)
    seed_everything(config.seed)
    model = model_builder(config.model, dataset, config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    session = Session(
        config=config,
        run=run.create(),
        device=device,
        dataset=dataset,
        model=model,
        optimizer=optimizer,
        cf_batches=BPRBatches(dataset, config.batch_size, config.seed),
        kg_batches=KGBatches(dataset, config.kg_batch_size, config.seed)
        if model.has_kg_phase
        else None,
        evaluator=RankingEvaluator(dataset, evaluation_ks(config), config.eval_batch_users, device),
        compression=CompressionConfig(
            bits=config.bits, group_size=config.group_size, scheme=config.scheme
        ),
        state=TrainingState(),
    )
    if config.resume and run.checkpoint.exists():
        restore_session(session)
    write_yaml_atomic(run.config, config.to_dict())
    return session


def restore_session(session: Session) -> None:
    """Load the run dir's checkpoint into the session (weights, optimizer, RNG states, progress)."""
    checkpoint = load_checkpoint(session.run.checkpoint, map_location=session.device)
    saved, current = checkpoint["config"], session.config.to_dict()
    changed = sorted(
        k for k in current if k not in RESUMABLE_CHANGES and saved.get(k) != current[k]
    )
    if changed:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in changed)
        raise ConfigError(
            f"{session.run.checkpoint}: cannot resume with changed settings ({details}); use the original settings or another --out"
        )
    if checkpoint["dataset_fingerprint"] != session.dataset.fingerprint:
        raise TinyKGError(
            f"{session.run.checkpoint}: the dataset at {session.dataset.path} changed since this run started; resume with the original data or use another --out"
        )
    session.model.load_state_dict(checkpoint["model"])
    session.optimizer.load_state_dict(checkpoint["optimizer"])
    session.state = TrainingState.from_dict(checkpoint["state"])
    restore_rng_state(checkpoint["rng"])
    session.resumed_at = session.state.next_epoch


def save_session(session: Session) -> None:
    save_checkpoint(
        session.run.checkpoint,
        {
            "model": session.model.state_dict(),
            "optimizer": session.optimizer.state_dict(),
            "state": session.state.to_dict(),
            "rng": capture_rng_state(),
            "config": session.config.to_dict(),
            "dataset_fingerprint": session.dataset.fingerprint,
        },
    )


# -- one epoch ------------------------------------------------------------------------------------


def _limit(batches: Iterable, max_batches: int | None) -> Iterable:
    for index, batch in enumerate(batches):
        if max_batches is not None and index >= max_batches:
            return
        yield batch


def _n_batches(batches: Any, max_batches: int | None) -> int:
    return len(batches) if max_batches is None else min(len(batches), max_batches)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_phase(
    session: Session, epoch: int, phase: str, batches: Any, loss_fn: Callable, measure: bool
) -> tuple[float, int | None, dict[str, int]]:
    """One pass of optimizer steps; returns (mean loss, activation bytes, bytes by module).

    With `measure`, the first step's forward runs under an `ActivationMeter`: the bytes autograd holds
    for backward in one real training step (after compression).
    """
    from tinykg_train.compress import ActivationMeter, compress_saved_tensors

    config, model, optimizer = session.config, session.model, session.optimizer
    compressing = compress_saved_tensors(session.compression) if config.compressed else None
    total = torch.zeros((), dtype=torch.float64, device=session.device)
    steps, activation_bytes, by_module = 0, None, {}
    progress = tqdm(
        _limit(batches.epoch(epoch), config.max_batches_per_epoch),
        total=_n_batches(batches, config.max_batches_per_epoch),
        desc=f"epoch {epoch} {phase}",
        leave=False,
        disable=None,  # shown on a terminal, silent in logs and pipes
    )
    for batch in progress:
        batch = [tensor.to(session.device, non_blocking=True) for tensor in batch]
        optimizer.zero_grad(set_to_none=True)
        with compressing if compressing is not None else contextlib.nullcontext():
            if measure and steps == 0:
                with ActivationMeter(model) as meter:
                    loss = loss_fn(*batch)
                activation_bytes, by_module = int(meter.total_bytes), dict(meter.by_module())
            else:
                loss = loss_fn(*batch)
        loss.backward()
        optimizer.step()
        total += loss.detach()
        steps += 1
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
    _synchronize(session.device)
    start = time.perf_counter()
    model.on_epoch_start(epoch)  # e.g. KGAT's attention refresh: part of the epoch's cost
    cf_loss, activation_bytes, by_module = run_phase(
        session, epoch, "cf", session.cf_batches, model.loss, measure=True
    )
    row: dict[str, Any] = {"epoch": epoch, "train_loss": cf_loss}
    if session.kg_batches is not None:
        row["kg_loss"], _, _ = run_phase(
            session, epoch, "kg", session.kg_batches, model.kg_loss, measure=False
        )
    _synchronize(session.device)
    row["epoch_seconds"] = time.perf_counter() - start
    row["activation_bytes"] = activation_bytes
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
    valid = session.evaluator.evaluate(session.model, "valid")
    row["eval_seconds"] = time.perf_counter() - start
    row.update(valid)
    row["improved"] = session.state.observe(epoch, valid, session.model, config.patience)


def epoch_report(session: Session, row: dict[str, Any]) -> dict[str, Any]:
    """What `on_epoch` receives: the row, with the latest valid metrics carried over unevaluated epochs."""
    state = session.state
    latest = next((r for r in reversed(state.history) if r.get("evaluated")), {})
    carried = {k: v for k, v in latest.items() if k.startswith(("recall@", "ndcg@"))}
    return {
        **carried,
        **row,
        "best_epoch": state.best_epoch,
        f"best_{STOP_METRIC}": state.best_value,
        "stopped_early": state.stopped_early,
    }


# -- the run --------------------------------------------------------------------------------------


def fit(session: Session, tracker: Tracker | None, on_epoch: Callable[[dict], Any] | None) -> None:
    """Epochs from the next unfinished one until `epochs` or early stopping."""
    config, state = session.config, session.state
    epochs = tqdm(
        range(state.next_epoch, config.epochs),
        initial=state.next_epoch,
        total=config.epochs,
        desc=f"{config.model} int{config.bits}",
        disable=None,
    )
    for epoch in epochs:
        if state.stopped_early:
            break
        row = train_epoch(session, epoch)
        evaluate_epoch(session, epoch, row)
        state.history.append(row)
        state.next_epoch = epoch + 1
        if tracker is not None:
            tracker.log_epoch(
                epoch, {k: v for k, v in row.items() if k not in ("evaluated", "improved")}
            )
        save_session(session)  # after logging: a kill in between re-runs (and re-logs) this epoch
        epochs.set_postfix(
            loss=f"{row['train_loss']:.4f}", recall=f"{row.get(STOP_METRIC, float('nan')):.4f}"
        )
        if on_epoch is not None:
            on_epoch(epoch_report(session, row))


def final_result(session: Session, test: dict[str, float], device_label: str) -> dict[str, Any]:
    """The content of metrics.json."""
    config, state = session.config, session.state
    measured = [b for b in state.column("activation_bytes") if b is not None]
    result: dict[str, Any] = {
        **test,
        "model": config.model,
        "bits": config.bits,
        "seed": config.seed,
        "dataset": str(session.dataset.path),
        "device": device_label,
        "best_epoch": state.best_epoch,
        "best_valid": state.best_valid,
        "epochs_trained": state.next_epoch,
        "stopped_early": state.stopped_early,
        "activation_bytes": max(measured) if measured else None,
        "activation_bytes_by_module": state.activation_by_module,
        "epoch_seconds": state.column("epoch_seconds"),
        "eval_seconds": state.column("eval_seconds"),
        "train_loss": state.column("train_loss"),
        "valid_history": state.valid_history(),
        "peak_rss_bytes": peak_rss_bytes(),
        "cuda_max_memory_allocated": cuda_peak_bytes(session.device),
        "n_parameters": sum(p.numel() for p in session.model.parameters()),
        "resumed_at_epoch": session.resumed_at,
        "config": config.to_dict(),
    }
    if session.kg_batches is not None:
        result["kg_loss"] = state.column("kg_loss")
    return result


def finish(session: Session, device_label: str) -> dict[str, Any]:
    """Rank the test split with the best epoch's weights; write metrics.json and the memory report."""
    state, run = session.state, session.run
    if state.best_model is None:
        raise TinyKGError(f"{run.path}: no epoch was evaluated, so there is no best model to test")
    session.model.load_state_dict(state.best_model)
    test = session.evaluator.evaluate(session.model, "test")
    result = final_result(session, test, device_label)
    if state.activation_by_module:
        write_activation_table(run.activation_table, state.activation_by_module)
        write_activation_chart(
            run.activation_chart,
            state.activation_by_module,
            f"{session.config.model} int{session.config.bits}: activation memory by module",
        )
    write_json_atomic(run.metrics, result)
    return result


def train(
    config: TrainConfig,
    *,
    tracker: Tracker | None = None,
    on_epoch: Callable[[dict], Any] | None = None,
    model_builder: ModelBuilder | None = None,
) -> dict[str, Any]:
    """Train `config.model` on `config.data` into `config.out`; returns what metrics.json holds.

    `on_epoch(report)` is called after each epoch (and its checkpoint) with `epoch`, `train_loss`,
    `epoch_seconds`, `activation_bytes`, the valid `recall@K`/`ndcg@K` (the latest evaluation's on
    epochs without one), `best_epoch` and `stopped_early`. A `tracker` (e.g. `MlflowTracker`) gets
    the same per epoch; when training raises, its run is marked FAILED (KILLED on Ctrl-C) and the
    exception propagates. `model_builder` replaces `tinykg_train.models.build_model` (for a model
    of your own that follows the Recommender contract).
    """
    device = resolve_device(config.device)
    run = check_run_dir(config)
    device_label = describe_device(device)
    reset_cuda_peak(device)
    if tracker is not None:
        tracker.start(config, run.create(), device_label)
    try:
        session = open_session(config, run, device, model_builder)
        fit(session, tracker, on_epoch)
        result = finish(session, device_label)
        if tracker is not None:
            tracker.finish(result, run)
    except KeyboardInterrupt:
        if tracker is not None:
            tracker.fail("KILLED")
        raise
    except BaseException:
        if tracker is not None:
            tracker.fail("FAILED")
        raise
    return result
