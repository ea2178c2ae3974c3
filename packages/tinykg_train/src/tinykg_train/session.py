"""Opening a run: check every input first, then build the model, optimizer and batches.

`open_session` writes nothing: a missing dataset, a run dir that holds another run's checkpoint, a
checkpoint whose settings differ from this run's all raise before any file or MLflow run exists.
`save_session`/`restore` move a session's whole state (weights, optimizer, RNG states, progress)
through a `weights_only=True` checkpoint. With a `replica` (one of N data-parallel workers, see
tinykg_train.distributed) the same session trains on its slice of each batch; the replica's hooks
are called here, in `epoch.run_phase` and in `trainer.fit`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tinykg_train.allocator import (
    release_freed_memory,
    releases_between_phases,
    tune_cpu_allocator,
)
from tinykg_train.checkpoint import (
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
    seed_everything,
)
from tinykg_train.compact_adam import CompactAdam, table_groups
from tinykg_train.config import TrainConfig
from tinykg_train.errors import ConfigError, TinyKGError
from tinykg_train.evaluate import RankingEvaluator
from tinykg_train.precision import build_precision
from tinykg_train.run_dir import RunDir
from tinykg_train.scale.partitioned_training import partitioned_batches
from tinykg_train.scale.sampled_training import sampled_batches
from tinykg_train.scale.table_training import table_training
from tinykg_train.training_state import TrainingState

# build_model(name, dataset, config) -> Recommender (see tinykg_train.models)
ModelBuilder = Callable[[str, Any, TrainConfig], Any]

# Settings a resumed run may change without invalidating the checkpoint.
# (`cache_rows` and `prefetch_steps` change where rows sit and when they are copied, never a number.)
RESUMABLE_CHANGES = frozenset(
    {"resume", "epochs", "device", "out", "data", "eval_batch_users", "threads"}
    | {"cache_rows", "prefetch_steps"}
)


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
    state: TrainingState
    precision: Any = None  # AdaptivePrecision under `bits: auto`
    resumed_at: int | None = None
    # for a model of your own that holds no CompressionConfig (see `compression`)
    fallback_compression: Any = None

    @property
    def compression(self):
        """The run's `CompressionConfig` for the saved-tensor hooks: the model's own object
        (`model.compression`, the Recommender contract), so hooks and model cannot drift apart and
        both follow `model.set_compression`. A model of your own without one gets the config's."""
        own = getattr(self.model, "compression", None)
        return self.fallback_compression if own is None else own
    replica: Any | None = None  # tinykg_train.distributed.Replica on a data-parallel worker
    # `scale.sampled_training.SampledBatches` with --sampler neighbor, its subclass
    # `scale.partitioned_training.PartitionedBatches` with --partitions N
    sampled: Any | None = None
    # `scale.table_training.TableTraining` with --sparse-adam / --offload-embeddings
    tables: Any | None = None
    # hand the free heap back between phases (a big graph: `allocator.releases_between_phases`)
    release_heap: bool = False

    def close(self) -> None:
        """Stop the run's background threads and wait for them: the offloaded tables' prefetch
        thread would otherwise live until the interpreter exits, where a daemon thread can be
        frozen inside a torch call while the process tears down."""
        if self.tables is not None:
            self.tables.close()

    def whole_model(self):
        """A context in which the model holds its whole embedding tables (they live in `tables`
        between its blocks under --sparse-adam / --offload-embeddings)."""
        return contextlib.nullcontext() if self.tables is None else self.tables.whole_tables()


def evaluation_ks(config: TrainConfig) -> tuple[int, ...]:
    """The cut-offs evaluated: the configured ones plus 20 (early stopping and the contract need it)."""
    return tuple(sorted({20, *config.eval_ks}))


def check_run_dir(config: TrainConfig) -> RunDir:
    """The run dir; refuse to overwrite an earlier run's checkpoint unless resuming."""
    run = RunDir(config.out)
    if run.path.exists() and not run.path.is_dir():
        raise ConfigError(f"--out {run.path} is a file, not a directory; choose another --out")
    if run.checkpoint.exists() and not config.resume:
        raise ConfigError(
            f"{run.path} already holds a checkpoint of an earlier run: pass --resume to continue it or choose another --out"
        )
    return run


def check_resumable(checkpoint: dict[str, Any], config: TrainConfig, dataset, path) -> None:
    """Refuse a checkpoint written with other settings or another dataset (one line, how to fix)."""
    current = config.to_dict()
    # a setting newer than the checkpoint was not there to set: the run trained with its default
    saved = {**TrainConfig().to_dict(), **checkpoint["config"]}
    changed = sorted(
        k for k in current if k not in RESUMABLE_CHANGES and saved.get(k) != current[k]
    )
    if changed:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in changed)
        raise ConfigError(
            f"{path}: cannot resume with changed settings ({details}); use the original settings or another --out"
        )
    if checkpoint["dataset_fingerprint"] != dataset.fingerprint:
        raise TinyKGError(
            f"{path}: the dataset at {dataset.path} changed since this run started; resume with the original data or use another --out"
        )


def open_session(
    config: TrainConfig,
    device: torch.device,
    model_builder: ModelBuilder | None = None,
    replica: Any | None = None,
) -> Session:
    """Check the inputs, build model/optimizer/batches/evaluator, and restore the checkpoint when
    resuming (a replica's `resume_from` file if it has one, else the run dir's). Writes nothing."""
    from kg_data import BPRBatches, KGBatches, KGDataset

    if not config.data:
        raise ConfigError("no dataset given: pass --data DIR (a dir written by pipelines.ingest)")
    run = check_run_dir(config)
    dataset = KGDataset.open(config.data)
    checkpoint = None
    source = getattr(replica, "resume_from", None) or run.checkpoint
    if config.resume and source.exists():
        checkpoint = load_checkpoint(source)
        check_resumable(checkpoint, config, dataset, source)
    if model_builder is None:
        from tinykg_train.models import build_model as model_builder

    if device.type == "cpu":
        tune_cpu_allocator()  # whole-graph tensors freed every step stay mapped (see allocator)
    seed_everything(config.seed)
    model = model_builder(config.model, dataset, config).to(device)
    largest = max((p.numel() * p.element_size() for p in model.parameters()), default=0)
    release_heap = releases_between_phases(largest)  # before the tables may leave the model
    if release_heap and device.type == "cpu":
        tune_cpu_allocator(large_graph=True)  # its big blocks mapped apart (see allocator)
    cf_batches = BPRBatches(dataset, config.batch_size, config.seed)
    partitioned = partitioned_batches(config, dataset, model)  # --partitions N: its own sources
    if partitioned is not None:
        sampled, kg_batches = partitioned
    else:
        sampled = sampled_batches(config, dataset, model, cf_batches)
        kg_batches = (
            KGBatches(dataset, config.kg_batch_size, config.seed) if model.has_kg_phase else None
        )
    # (a model of your own may lack the hook)
    whole_graph_hook = getattr(model, "on_whole_graph_training", None)
    if sampled is None and whole_graph_hook is not None:
        whole_graph_hook()  # e.g. what only sampled steps read goes
    if "kg" in config.exact_phases and not model.has_kg_phase:
        raise ConfigError(f"--exact-phases kg: {config.model} has no KG phase (only cf)")
    tables = table_training(config, model, device)  # takes the big tables out of the model
    session = Session(
        config=config,
        run=run,
        device=device,
        dataset=dataset,
        model=model,
        optimizer=dense_optimizer(
            model,
            model.parameters() if tables is None else tables.dense_parameters(),
            config,
        ),
        cf_batches=cf_batches,
        kg_batches=kg_batches,
        evaluator=RankingEvaluator(
            dataset,
            evaluation_ks(config),
            config.eval_batch_users,
            device,
            sample_users=config.eval_users,
            seed=config.seed,
            release_heap=release_heap,
        ),
        state=TrainingState(),
        fallback_compression=None
        if getattr(model, "compression", None) is not None
        else config.compression_config(),
        replica=replica,
        sampled=sampled,
        tables=tables,
        release_heap=release_heap,
    )
    if tables is not None:
        session.sampled.tables = tables
    session.precision = build_precision(config, session.compression)
    if replica is not None:
        replica.attach(session)
    if checkpoint is not None:
        restore(session, checkpoint)
    if device.type == "cpu":
        release_freed_memory()  # what building the session freed (see allocator)
    return session


def dense_optimizer(model, parameters, config) -> torch.optim.Optimizer:
    """The run's optimizer over `parameters` of `model` (possibly none: every parameter of the
    model may be a row-wise table): `CompactAdam`, which is Adam's arithmetic for float32 state
    and, with `adam_state` bfloat16 or rowwise, keeps the embedding tables' state compact.

    Its float32 step makes one parameter-sized temporary for the denominator, where torch's
    one-tensor Adam (its choice on the CPU) makes two (one table fewer at the step's peak: 305 MiB
    on the 10M graph's node table), with the same bits (tested); and it leaves torch's compiler
    unloaded (`eager_optimizer`: 143 MiB of resident memory)."""
    parameters = list(parameters)
    if config.adam_state != "float32":
        groups = table_groups(model, parameters, config.adam_state)
        return CompactAdam(groups, lr=config.lr, seed=config.seed)
    return CompactAdam([{"params": parameters}], lr=config.lr, seed=config.seed)


def restore(session: Session, checkpoint: dict[str, Any]) -> None:
    """Put a checkpoint's weights, optimizer state, progress and RNG states into the session."""
    session.model.load_state_dict(checkpoint["model"])
    session.optimizer.load_state_dict(checkpoint["optimizer"])
    session.state = TrainingState.from_dict(checkpoint["state"])
    if session.tables is not None:
        session.tables.load_state_dict(checkpoint["row_tables"])
    replica = session.replica
    restore_rng_state(checkpoint["rng"] if replica is None else replica.rng_state(checkpoint))
    if session.precision is not None and checkpoint.get("precision"):
        session.precision.load_state_dict(checkpoint["precision"])
    session.resumed_at = session.state.next_epoch


def save_session(session: Session) -> None:
    """Checkpoint the session after a finished epoch (atomic: a kill keeps the previous one)."""
    payload = {
        "model": session.model.state_dict(),
        "optimizer": session.optimizer.state_dict(),
        "state": session.state.to_dict(),
        "rng": capture_rng_state(),
        "config": session.config.to_dict(),
        "dataset_fingerprint": session.dataset.fingerprint,
        "precision": None if session.precision is None else session.precision.state_dict(),
        "row_tables": None if session.tables is None else session.tables.state_dict(),
    }
    if session.replica is not None:  # rank 0 writes it with every rank's RNG state
        session.replica.save(session, payload)
    else:
        save_checkpoint(session.run.checkpoint, payload)
