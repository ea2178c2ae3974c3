"""TrainConfig: every setting of one training run, from defaults, a YAML file and CLI overrides.

One immutable dataclass shared by `pipelines.train`, the sweep trials and the models, so a run is fully
described by `config.to_dict()` (logged to MLflow and stored in checkpoints). Values are coerced to
the field's type on construction (YAML reads `1e-3` as a string, a CLI gives "20,50" for `eval_ks`),
`extra` to the types of the models' knobs (`model_defaults.KNOBS`), then validated; anything wrong
is a one-line `ConfigError` that says how to fix it.

`TrainConfig(...)` starts from generic defaults (KGAT-like); `TrainConfig.for_model(name, ...)` and
`TrainConfig.layered(...)` start from the model's own (`model_defaults.MODEL_DEFAULTS`), as
`pipelines.train --model` and the sweep trials do. This module imports no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinykg_train.coercion import as_bool, as_float, as_int, as_int_list, as_str, wrong
from tinykg_train.compression_defaults import (
    BITS,
    DEFAULT_BITS,
    DEFAULT_NORMALIZE_BITS,
    DEFAULT_SCHEME,
    DEFAULT_SCORE_BITS,
    SCHEMES,
    check_scheme,
    check_width,
)
from tinykg_train.errors import ConfigError
from tinykg_train.model_defaults import MODEL_DEFAULTS, coerce_extra, model_defaults

if TYPE_CHECKING:
    from tinykg_train.compress import CompressionConfig

__all__ = [
    "AUTO",
    "BITS",
    "DEVICES",
    "MODELS",
    "SCHEMES",
    "TrainConfig",
    "parse_size",
    "read_yaml_mapping",
]

SAMPLERS = ("none", "neighbor")  # whole-graph steps, or each step on its batch's sampled subgraph
DEFAULT_FANOUT = 10  # neighbors per node and layer when `fanouts` is not given

PHASES = ("cf", "kg")  # the trainer's phases: BPR steps; the KG steps of a model that has them
AUTO = "auto"  # `bits: auto`: each saved tensor's width chosen from its measured sensitivity

MODELS = tuple(MODEL_DEFAULTS)
DEVICES = ("auto", "cpu", "cuda")
# the embedding tables' Adam state (`--adam-state`; tinykg_train.compact_adam)
ADAM_STATES = ("float32", "bfloat16", "rowwise")

# The type of every field (to add a field: give it a default below and put it in one table).
INT_FIELDS = frozenset(
    {
        "score_bits", "normalize_bits", "epochs", "seed", "batch_size", "kg_batch_size",
        "embed_dim", "n_layers", "kg_neighbors", "n_intents", "eval_every", "eval_batch_users",
        "patience", "min_epochs", "adapt_every", "workers", "partitions", "prefetch_steps",
    }
)  # fmt: skip
OPTIONAL_INT_FIELDS = frozenset(
    {"group_size", "max_batches_per_epoch", "threads", "cache_rows", "eval_users"}
)
FLOAT_FIELDS = frozenset({"lr", "l2", "dropout", "auto_bits"})
STR_FIELDS = frozenset({"data", "model", "scheme", "device", "out", "sampler", "adam_state"})
OPTIONAL_STR_FIELDS = frozenset({"memory_budget"})
BOOL_FIELDS = frozenset({"resume", "sparse_adam", "offload_embeddings"})
# coerced by name in _coerce
SPECIAL_FIELDS = frozenset({"bits", "eval_ks", "fanouts", "exact_phases", "extra"})


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one run. `bits=32` trains without compression; `bits="auto"` chooses each saved
    tensor's width from its measured gradient sensitivity (`tinykg_train.compress.adaptive`)."""

    data: str = ""
    model: str = "kgat"
    bits: int | str = DEFAULT_BITS
    group_size: int | None = None
    scheme: str = DEFAULT_SCHEME  # auto: normal levels at 2 bits, uniform otherwise
    # the least widths of the embeddings the BPR scores read and of the L2-normalized outputs saved
    score_bits: int = DEFAULT_SCORE_BITS
    normalize_bits: int = DEFAULT_NORMALIZE_BITS
    # `bits: auto`: the average width of the quantized saved tensors it aims at, and how often (in
    # epochs) it measures the sensitivities again (0 = once, before the first epoch)
    auto_bits: float = 2.5
    adapt_every: int = 10
    # the most memory one training step may use (parameters, gradients, optimizer state, graph
    # buffers, activations held, the step's temporaries), e.g. "300MB"; needs `bits: auto`
    memory_budget: str | None = None
    # training phases ("cf", "kg") whose quantized saves are kept exact at fixed widths: which phase
    # a width's loss comes from; both = the compressed code path storing nothing quantized, an A/A
    # control against bits 32 (the same gradients, only float rounding differs)
    exact_phases: tuple[str, ...] = ()
    epochs: int = 20
    seed: int = 0
    lr: float = 1e-3
    l2: float = 1e-5  # weight of the L2 penalty on the embeddings a batch touches
    batch_size: int = 2048
    kg_batch_size: int = 2048
    embed_dim: int = 64
    n_layers: int = 3
    dropout: float = 0.1
    kg_neighbors: int = 8  # KGCN: fixed-size sampled neighbors per entity
    n_intents: int = 4  # KGIN: user intents
    device: str = "auto"
    out: str = "runs/latest"
    eval_ks: tuple[int, ...] = (20,)
    eval_every: int = 1
    eval_batch_users: int = 1024
    # rank a seeded sample of at most this many users of each split (every item still ranked), for
    # graphs whose full ranking of every user takes longer than the training; None: every user
    eval_users: int | None = None
    patience: int = 5  # early stopping: evaluations without a better valid Recall@20
    min_epochs: int = 0  # early stopping never ends a run before this many epochs
    max_batches_per_epoch: int | None = None  # cap for quick runs and tests
    threads: int | None = None  # torch CPU threads; None: the CPUs this process may use (threads.py)
    # "neighbor": each CF step propagates over its batch's sampled `n_layers`-hop subgraph only,
    # `fanouts[i]` neighbors per node at layer i (-1 = all; None = DEFAULT_FANOUT per layer)
    sampler: str = "none"
    fanouts: tuple[int, ...] | None = None
    # > 1: train on that many self-sufficient partitions of the graph, one at a time (each CF step
    # on its partition's interactions and graph only); 1 = off (scale.partitioned_training)
    partitions: int = 1
    # sampled or partitioned training: the big embedding tables (the ones the local path reads through
    # `rows`) updated row by row with SparseAdam (`scale.RowTables`) instead of dense Adam, on the
    # device (`sparse_adam`), or in host memory with a device cache of `cache_rows` rows per table
    # (None: sized to the steps) fed `prefetch_steps` steps ahead (`offload_embeddings`)
    sparse_adam: bool = False
    offload_embeddings: bool = False
    # the Adam state of the dense optimizer's embedding tables (`embedding_tables`): float32 (Adam's),
    # bfloat16 (both moments) or rowwise (first moment bfloat16, second per row); compact_adam.py
    adam_state: str = "float32"
    cache_rows: int | None = None
    prefetch_steps: int = 2
    resume: bool = False
    workers: int = 1  # data-parallel Ray Train workers; 1 trains in this process (tinykg_train.distributed)
    extra: dict[str, Any] = field(default_factory=dict)  # model-specific knobs, logged as params

    def __post_init__(self) -> None:
        for name in self.field_names():
            object.__setattr__(self, name, _coerce(name, getattr(self, name)))
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError with a one-line fix for any invalid setting."""
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}: choose one of {', '.join(MODELS)}")
        for name in ("bits", "score_bits", "normalize_bits"):
            if not (name == "bits" and self.adaptive):
                check_width(name, getattr(self, name), allow_auto=name == "bits")
        check_scheme(self.scheme, 2 if self.adaptive else self.bits)
        if not 1 <= self.auto_bits <= 8:
            raise ConfigError(
                f"'auto_bits' (the average width `bits: auto` aims at) needs to be in [1, 8] (got {self.auto_bits})"
            )
        if self.adapt_every < 0:
            raise ConfigError(
                f"'adapt_every' needs to be >= 0 epochs (0 = measure once) (got {self.adapt_every})"
            )
        if self.memory_budget is not None:
            parse_size(self.memory_budget, "memory_budget")  # a malformed size fails here
            if not self.adaptive:
                raise ConfigError(
                    f"'memory_budget' chooses the widths itself: use it with bits auto (got bits {self.bits})"
                )
        self.validate_exact_phases()
        if self.adaptive and self.workers > 1:
            raise ConfigError(
                "bits auto measures sensitivities in one process; with workers > 1 each worker would choose its own widths: pass fixed --bits (1, 2, 4, 8 or 32)"
            )
        self.validate_row_tables()
        if self.sampler != "none" and (self.adaptive or self.workers > 1):
            raise ConfigError(
                f"--sampler {self.sampler} runs in one process at fixed widths for now: drop "
                + ("--workers" if self.workers > 1 else "--bits auto (pass 1, 2, 4, 8 or 32)")
            )
        if self.device not in DEVICES:
            raise ConfigError(f"'device' must be one of {', '.join(DEVICES)} (got {self.device!r})")
        positive = (
            "epochs", "batch_size", "kg_batch_size", "embed_dim", "eval_every",
            "eval_batch_users", "patience", "kg_neighbors", "n_intents", "workers",
        )  # fmt: skip
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(
                    f"'{name}' needs to be a positive integer (got {getattr(self, name)})"
                )
        if self.min_epochs < 0:
            raise ConfigError(f"'min_epochs' needs to be >= 0 (got {self.min_epochs})")
        if self.n_layers < 0:
            raise ConfigError(f"'n_layers' needs to be >= 0 (got {self.n_layers})")
        if not self.lr > 0:
            raise ConfigError(f"'lr' needs to be > 0 (got {self.lr})")
        if not self.l2 >= 0:
            raise ConfigError(f"'l2' needs to be >= 0 (got {self.l2})")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"'dropout' needs to be in [0, 1) (got {self.dropout})")
        if not self.eval_ks or min(self.eval_ks) <= 0:
            raise ConfigError(
                f"'eval_ks' needs positive cut-offs, e.g. [20] (got {list(self.eval_ks)})"
            )
        for name in OPTIONAL_INT_FIELDS:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"'{name}' needs to be a positive integer or null (got {value})")
        self.validate_sampling()
        self.validate_partitions()

    def validate_partitions(self) -> None:
        """`partitions` > 1 needs a model with a graph and one process at fixed widths."""
        if self.partitions < 1:
            raise ConfigError(
                f"'partitions' needs to be a positive integer (1 = whole graph) (got {self.partitions})"
            )
        if self.partitions == 1:
            return
        if self.model == "bprmf":
            raise ConfigError("BPR-MF has no graph to partition: drop --partitions (or pass 1)")
        if self.adaptive or self.workers > 1:
            raise ConfigError(
                f"--partitions {self.partitions} runs in one process at fixed widths for now: drop "
                + ("--workers" if self.workers > 1 else "--bits auto (pass 1, 2, 4, 8 or 32)")
            )
        if self.model == "kgcn" and self.sampler == "none":
            raise ConfigError(
                "KGCN draws a fixed number of neighbors per node: with --partitions add "
                "--sampler neighbor --fanouts K,K (positive counts, one per --layers)"
            )

    def validate_row_tables(self) -> None:
        """`sparse_adam` / `offload_embeddings` and their settings (one line, how to fix)."""
        if self.cache_rows is not None and not self.offload_embeddings:
            raise ConfigError(
                "'cache_rows' sizes the device cache of offloaded tables: add --offload-embeddings or drop --cache-rows"
            )
        if self.prefetch_steps < 0:
            raise ConfigError(
                f"'prefetch_steps' needs to be >= 0 steps of look-ahead (got {self.prefetch_steps})"
            )
        if self.adam_state not in ADAM_STATES:
            raise ConfigError(
                f"'adam_state' must be one of {', '.join(ADAM_STATES)} (got {self.adam_state!r})"
            )
        if self.adam_state == "rowwise" and self.row_wise_tables:
            raise ConfigError(
                "--adam-state rowwise keeps a second moment per row in the dense Adam's tables, "
                "which --sparse-adam and --offload-embeddings take out of it (SparseAdam row by "
                "row, whose tables take --adam-state bfloat16): drop one"
            )
        if not self.row_wise_tables:
            return
        flag = "--offload-embeddings" if self.offload_embeddings else "--sparse-adam"
        if self.workers > 1:
            raise ConfigError(f"{flag} updates the tables in one process: drop --workers")
        if self.adaptive:
            raise ConfigError(f"{flag} runs at fixed widths: pass --bits 1, 2, 4, 8 or 32, not auto")
        if self.sampler == "none" and self.partitions == 1:
            raise ConfigError(
                f"{flag} trains through the sampled local path: add --sampler neighbor "
                "(or --partitions N)"
            )

    @property
    def row_wise_tables(self) -> bool:
        """Whether the big tables are `scale.RowTables` (SparseAdam row by row), here or offloaded."""
        return self.sparse_adam or self.offload_embeddings

    def validate_sampling(self) -> None:
        if self.sampler not in SAMPLERS:
            raise ConfigError(
                f"'sampler' must be one of {', '.join(SAMPLERS)} (got {self.sampler!r})"
            )
        if self.fanouts is None:
            return
        if self.sampler == "none":
            raise ConfigError(
                "'fanouts' applies to sampled training only: add --sampler neighbor or drop --fanouts"
            )
        if any(k <= 0 and k != -1 for k in self.fanouts):
            raise ConfigError(
                f"'fanouts' needs positive neighbor counts or -1 for all (got {list(self.fanouts)})"
            )
        if len(self.fanouts) != self.n_layers:
            raise ConfigError(
                f"'fanouts' needs one count per layer: {self.n_layers} for n_layers="
                f"{self.n_layers} (got {len(self.fanouts)}: {list(self.fanouts)})"
            )

    def validate_exact_phases(self) -> None:
        """Known phases, at a fixed compressed width (where keeping them exact means something)."""
        unknown = [p for p in self.exact_phases if p not in PHASES]
        if unknown:
            raise ConfigError(
                f"'exact_phases' names training phases: {', '.join(PHASES)} (got {', '.join(unknown)})"
            )
        if self.exact_phases and not self.compressed:
            raise ConfigError(
                "'exact_phases' keeps phases exact under compression; with bits 32 every save is exact already: pass --bits 1, 2, 4 or 8 or drop --exact-phases"
            )
        if self.exact_phases and self.adaptive:
            raise ConfigError(
                "'exact_phases' applies to fixed widths; bits auto chooses every width itself: pass --bits 1, 2, 4 or 8 or drop --exact-phases"
            )

    @property
    def layer_fanouts(self) -> tuple[int, ...]:
        """Neighbors sampled per node at each layer: `fanouts`, or DEFAULT_FANOUT per layer."""
        return self.fanouts if self.fanouts is not None else (DEFAULT_FANOUT,) * self.n_layers

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> TrainConfig:
        """Build from a plain dict, rejecting unknown keys with the list of valid ones."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ConfigError(
                f"{source}: unknown setting(s) {', '.join(unknown)}; valid: {', '.join(cls.field_names())}"
            )
        return cls(**values)

    @classmethod
    def for_model(cls, model: str, **settings: Any) -> TrainConfig:
        """`model`'s own defaults (`model_defaults.MODEL_DEFAULTS`) with `settings` on top.

        `TrainConfig.for_model("kgcn", data="d")` has KGCN's 32 dims and one hop, where
        `TrainConfig(model="kgcn", data="d")` keeps the generic (KGAT-like) defaults.
        """
        return cls.layered({"model": model}, settings)

    @classmethod
    def layered(cls, *layers: Mapping[str, Any], source: str = "config") -> TrainConfig:
        """Settings from `layers`, later ones winning, over the defaults of the model they name.

        The model is the last `model` any layer gives (else the default, kgat); its defaults sit
        between TrainConfig's and the first layer. `extra` mappings merge key by key. This is the
        layering of `pipelines.train` (saved config.yaml on --resume < --config < flags) and of
        the sweep trials (`train:` < the trial's axes).
        """
        merged: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for layer in layers:
            for name, value in layer.items():
                if name == "extra" and isinstance(value, Mapping):
                    extra.update(value)
                else:
                    merged[name] = value  # a non-mapping `extra` is refused by from_dict
        if extra and "extra" not in merged:
            merged["extra"] = extra
        model = merged.get("model", cls.model)
        base = model_defaults(model) if isinstance(model, str) and model in MODEL_DEFAULTS else {}
        return cls.from_dict({**base, **merged}, source=source)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
        """Read a YAML mapping of settings; `overrides` (e.g. from the command line) win.

        Generic defaults underneath, like `TrainConfig(...)`; `layered` puts the model's own there.
        """
        return cls.from_dict({**read_yaml_mapping(path), **(overrides or {})}, source=str(path))

    def with_overrides(self, **overrides: Any) -> TrainConfig:
        """A copy with some settings changed (validated)."""
        return self.from_dict({**self.to_dict(), **overrides})

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["eval_ks"] = list(self.eval_ks)
        values["fanouts"] = None if self.fanouts is None else list(self.fanouts)
        values["exact_phases"] = list(self.exact_phases)
        return values

    @property
    def compressed(self) -> bool:
        return self.bits != 32

    @property
    def adaptive(self) -> bool:
        """True when each saved tensor's width is chosen during training (`bits: auto`)."""
        return self.bits == AUTO

    def compression_config(self) -> CompressionConfig:
        """How the activations of this run are saved (imported here: it pulls in torch). Under
        `bits: auto` the ops ask for 2 bits and `compress.adaptive` decides each tensor's width."""
        from tinykg_train.compress import CompressionConfig

        return CompressionConfig(
            bits=2 if self.adaptive else self.bits,
            group_size=self.group_size,
            scheme=self.scheme,
            score_bits=self.score_bits,
            normalize_bits=self.normalize_bits,
        )


SIZE_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip


def parse_size(text: str, name: str = "size") -> int:
    """Bytes of a size like `300MB`, `1.5 GiB`, `2GB` or `4096` (decimal kB/MB/GB/TB, binary
    KiB/MiB/GiB/TiB, case-insensitive); a ConfigError naming `name` otherwise."""
    import re

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in SIZE_UNITS or float(match.group(1)) <= 0:
        raise ConfigError(
            f"'{name}' needs a positive size like 300MB, 1.5GiB or 2GB (got {text!r})"
        )
    return int(float(match.group(1)) * SIZE_UNITS[unit])


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The `setting: value` mapping of a YAML file; errors name the file (and line for bad YAML)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}{line}: not valid YAML ({problem})") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(
            f"{path}: expected a mapping of setting: value, got {type(loaded).__name__}"
        )
    return loaded


def _coerce(name: str, value: Any) -> Any:
    """`value` as the type of field `name`, or a ConfigError that names the field."""
    label = f"'{name}'"
    if name in OPTIONAL_INT_FIELDS | OPTIONAL_STR_FIELDS and value is None:
        return None
    if name == "bits":
        if isinstance(value, str) and value.strip().lower() == AUTO:
            return AUTO
        return as_int(value, label)
    if name in INT_FIELDS or name in OPTIONAL_INT_FIELDS:
        return as_int(value, label)
    if name in FLOAT_FIELDS:
        return as_float(value, label)
    if name in OPTIONAL_STR_FIELDS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # memory_budget: 300000000 is a size too
    if name in STR_FIELDS or name in OPTIONAL_STR_FIELDS:
        return as_str(value, label)
    if name in BOOL_FIELDS:
        return as_bool(value, label)
    if name == "eval_ks":
        return tuple(sorted(set(as_int_list(value, label, "a list of cut-offs like [20, 50]"))))
    if name == "fanouts" and value is not None:
        hint = "a list of neighbor counts per layer like [10, 10] (-1 = all)"
        counts = as_int_list(value, label, hint)
        if not counts:
            raise wrong(label, hint, value)
        return tuple(counts)
    if name == "exact_phases":
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
            raise wrong(label, "a list of phases like [kg] or cf,kg", value)
        return tuple(dict.fromkeys(value))
    if name == "extra":
        return coerce_extra(value)
    return value  # a field in no table: tests/tinykg_train/test_config.py names it
