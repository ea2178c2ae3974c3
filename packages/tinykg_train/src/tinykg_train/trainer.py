"""`train(config)`: THE training function, used by `pipelines.train` and by every sweep trial.

One run: Adam on the model's BPR loss (its L2 term inside), then, for models with a KG phase (KGAT),
a TransR pass over the KG triples; evaluation on the valid split every `eval_every` epochs with
early stopping on valid Recall@20 (`patience` evaluations without gain); a checkpoint after every
epoch; at the end the best epoch's weights are ranked on the test split, the most-popular ranking
of the same users beside them (`most_popular`: the bar the model's metrics are read against), and
`metrics.json` is written.

Determinism: the run seeds torch, NumPy and Python from `config.seed`; batches are a pure function
of (seed, epoch); the checkpoint holds every RNG state, so a run resumed after a kill -9 reproduces
the uninterrupted run's numbers exactly on CPU.

Data parallel (`workers` > 1, tinykg_train.distributed): each Ray Train worker calls `train` with a
`replica`; the loop is this one, rank 0 alone writes the run dir and tracks.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from tqdm.auto import tqdm

from tinykg_train.activation_report import write_activation_chart, write_activation_table
from tinykg_train.best_weights import drop_older_best_weights, kept_on_disk, load_best_weights
from tinykg_train.compression_defaults import width_label
from tinykg_train.config import TrainConfig
from tinykg_train.device import describe_device, resolve_device
from tinykg_train.epoch import evaluate_epoch, train_epoch
from tinykg_train.errors import TinyKGError
from tinykg_train.memory import cuda_peak_bytes, peak_rss_bytes, reset_cuda_peak
from tinykg_train.memory_breakdown import cuda_run_peak
from tinykg_train.most_popular import popularity_bar
from tinykg_train.precision import prepare as prepare_precision
from tinykg_train.run_dir import write_json_atomic, write_yaml_atomic
from tinykg_train.runtime import kernel_calls, run_record
from tinykg_train.session import ModelBuilder, Session, open_session, save_session
from tinykg_train.threads import apply_threads
from tinykg_train.tracking import Tracker
from tinykg_train.training_state import STOP_METRIC

__all__ = ["ModelBuilder", "run_epoch", "train"]


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


def fit(session: Session, tracker: Tracker | None, on_epoch: Callable[[dict], Any] | None) -> None:
    """Epochs from the next unfinished one until `epochs` or early stopping."""
    config, state = session.config, session.state
    epochs = tqdm(
        range(state.next_epoch, config.epochs),
        initial=state.next_epoch,
        total=config.epochs,
        desc=f"{config.model} {width_label(config.bits)}",
        disable=None,
    )
    for epoch in epochs:
        if state.stopped_early:
            break
        row = run_epoch(session, epoch, tracker)
        epochs.set_postfix(
            loss=f"{row['train_loss']:.4f}", recall=f"{row.get(STOP_METRIC, float('nan')):.4f}"
        )
        if on_epoch is not None:
            on_epoch(epoch_report(session, row))


def run_epoch(session: Session, epoch: int, tracker: Tracker | None = None) -> dict[str, Any]:
    """Train and (when due) evaluate one epoch, log it, checkpoint the session; the history row.

    What `fit` does per epoch, also called one epoch at a time by drivers that interleave several
    trainings (benchmarks.bench_matrix times the widths' epochs taking turns)."""
    state = session.state
    row = train_epoch(session, epoch)
    if session.replica is not None:
        session.replica.share_timings(row)
    evaluate_epoch(session, epoch, row)
    state.history.append(row)
    state.next_epoch = epoch + 1
    if tracker is not None:
        tracker.log_epoch(
            epoch, {k: v for k, v in row.items() if k not in ("evaluated", "improved")}
        )
    save_session(session)  # after logging: a kill in between re-runs (and re-logs) this epoch
    if kept_on_disk(session) and state.best_epoch >= 0:
        drop_older_best_weights(session.run, state.best_epoch)
    return row


def final_result(
    session: Session,
    test: dict[str, float],
    popular: dict[str, float],
    device_label: str,
    kernels_since: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    """The content of metrics.json: test metrics of the best epoch and the most-popular ranking's
    (`popular`), histories, memory, the config, and what ran (`runtime.run_record`: the kernel
    calls after `kernels_since`, per backend)."""
    config, state = session.config, session.state
    measured = [b for b in state.column("activation_bytes") if b is not None]
    result: dict[str, Any] = {
        **test,
        "most_popular": popular,
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
        "cuda_max_memory_allocated": cuda_run_peak(
            state.memory_breakdown, cuda_peak_bytes(session.device)
        ),
        "memory_breakdown": state.memory_breakdown,
        "n_parameters": sum(p.numel() for p in session.model.parameters()),
        "resumed_at_epoch": session.resumed_at,
        **run_record(kernels_since),
        "workers": config.workers,
        "config": config.to_dict(),
    }
    for rank in range(1, config.workers):
        result[f"epoch_seconds_rank{rank}"] = state.column(f"epoch_seconds_rank{rank}")
    if config.workers > 1:
        result["allreduce_seconds"] = state.column("allreduce_seconds")
    if session.kg_batches is not None:
        result["kg_loss"] = state.column("kg_loss")
    if session.precision is not None:
        result["precision"] = session.precision.report()
    if session.sampled is not None:  # seconds each epoch's steps waited for their subgraphs
        result["sampler_wait_seconds"] = state.column("sampler_wait_seconds")
    partition_summary = getattr(session.sampled, "partition_summary", None)
    if partition_summary is not None:  # --partitions N: replication, nodes per partition...
        result.update(partition_summary())
    if session.tables is not None:  # settings, bytes on the device and the host, cache counts
        result["row_tables"] = session.tables.report()
    return result


def is_leader(session: Session) -> bool:
    """Whether this process writes the run dir: always, except on data-parallel ranks > 0."""
    return session.replica is None or session.replica.is_leader


def finish(
    session: Session, device_label: str, kernels_since: dict[str, dict[str, int]] | None = None
) -> dict[str, Any]:
    """Rank the test split with the best epoch's weights; write metrics.json and the memory report."""
    state, run = session.state, session.run
    if state.best_epoch < 0:
        raise TinyKGError(f"{run.path}: no epoch was evaluated, so there is no best model to test")
    best = state.best_model
    if best is None:
        best = load_best_weights(run, state.best_epoch)
    if session.tables is None:
        session.model.load_state_dict(best)
    else:  # the tables live in `tables` while training; the best epoch's are in `best`
        session.tables.load_whole_model(best)
    del best
    test = session.evaluator.evaluate(session.model, "test")
    # the bar the test metrics are read against: popularity on the same users (a fraction of a
    # model's ranking time: no propagation, the scores are the train counts). On every rank: a
    # data-parallel evaluator ranks on rank 0 and broadcasts. Before `final_result`, so the peak
    # RSS it records covers this ranking too.
    popular = popularity_bar(session.evaluator, "test")
    result = final_result(session, test, popular, device_label, kernels_since)
    if not is_leader(session):
        return result
    if state.activation_by_module:
        widths = None if session.precision is None else session.precision.cf_module_widths()
        write_activation_table(run.activation_table, state.activation_by_module, widths)
        write_activation_chart(
            run.activation_chart,
            state.activation_by_module,
            f"{session.config.model} {width_label(session.config.bits)}: "
            f"{sum(state.activation_by_module.values()) / 2**20:.2f} MiB saved for backward, by module",
        )
    write_json_atomic(run.metrics, result)
    return result


def train(
    config: TrainConfig,
    *,
    tracker: Tracker | None = None,
    on_epoch: Callable[[dict], Any] | None = None,
    model_builder: ModelBuilder | None = None,
    replica: Any | None = None,
) -> dict[str, Any]:
    """Train `config.model` on `config.data` into `config.out`; returns what metrics.json holds.

    First torch's CPU threads are set from `config.threads` (None: the CPUs this process may use,
    see `tinykg_train.threads`); metrics.json records the count as `torch_threads`.

    Bad inputs (dataset dir, run dir, checkpoint) raise before anything is written. `on_epoch(report)`
    is called after each epoch (and its checkpoint) with `epoch`, `train_loss`, `epoch_seconds`,
    `activation_bytes`, the valid `recall@K`/`ndcg@K` (the latest evaluation's on epochs without
    one), `best_epoch` and `stopped_early`. A `tracker` (e.g. `MlflowTracker`) gets the same per
    epoch; when training raises, its run is marked FAILED (KILLED on Ctrl-C) and the exception
    propagates. `model_builder` replaces `tinykg_train.models.build_model` (for a model of your own
    that follows the Recommender contract). `replica` makes this call one of N data-parallel
    workers (tinykg_train.distributed.worker passes it; only rank 0 may have a tracker).
    """
    apply_threads(config.threads)  # once, before anything runs torch ops; run_record records it
    kernels_before = kernel_calls()  # metrics.json records the backends this run's calls ran on
    device = resolve_device(config.device)
    device_label = describe_device(device)
    reset_cuda_peak(device)
    session = open_session(config, device, model_builder, replica)
    try:
        return _train_session(session, tracker, on_epoch, device_label, kernels_before)
    finally:
        session.close()  # background threads stopped before the caller (or the interpreter) goes on


def _train_session(session, tracker, on_epoch, device_label: str, kernels_before) -> dict[str, Any]:
    """`train` once its session is open: fit, finish, and the tracker's run around them."""
    config = session.config
    for line in prepare_precision(session):  # `bits: auto`: may refuse a budget; writes nothing
        print(line, flush=True)
    run, fresh = session.run, not session.run.path.exists()
    if not is_leader(session):
        fit(session, None, on_epoch)
        return finish(session, device_label, kernels_before)
    run.create()
    if tracker is not None:
        try:
            tracker.start(config, run, device_label)
        except BaseException:
            if fresh:  # leave nothing behind for a store that could not be opened
                shutil.rmtree(run.path, ignore_errors=True)
            raise
    write_yaml_atomic(run.config, config.to_dict())
    try:
        fit(session, tracker, on_epoch)
        result = finish(session, device_label, kernels_before)
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
