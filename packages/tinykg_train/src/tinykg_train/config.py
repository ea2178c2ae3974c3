"""TrainConfig: every setting of one training run, from defaults, a YAML file and CLI overrides.

One immutable dataclass shared by `pipelines.train`, the sweep trials and the models, so a run is fully
described by `config.to_dict()` (logged to MLflow and stored in checkpoints). Values are coerced to
the field's type on construction (YAML reads `1e-3` as a string, a CLI gives "20,50" for `eval_ks`),
then validated; anything wrong is a one-line `ConfigError` that says how to fix it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinykg_train.errors import ConfigError

if TYPE_CHECKING:
    from tinykg_train.compress import CompressionConfig

MODELS = ("kgat", "kgin", "kgcn", "lightgcn", "bprmf")
BITS = (1, 2, 4, 8, 32)
DEVICES = ("auto", "cpu", "cuda")
SCHEMES = ("uniform", "normal", "auto")
SAMPLERS = ("none", "neighbor")  # whole-graph steps, or each step on its batch's sampled subgraph
DEFAULT_FANOUT = 10  # neighbors per node and layer when `fanouts` is not given

INT_FIELDS = frozenset(
    {
        "bits", "score_bits", "normalize_bits", "epochs", "seed", "batch_size", "kg_batch_size",
        "embed_dim", "n_layers", "kg_neighbors", "n_intents", "eval_every", "eval_batch_users",
        "patience",
    }
)  # fmt: skip
OPTIONAL_INT_FIELDS = frozenset({"group_size", "max_batches_per_epoch"})
FLOAT_FIELDS = frozenset({"lr", "l2", "dropout"})
STR_FIELDS = frozenset({"data", "model", "scheme", "device", "out", "sampler"})


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one run. `bits=32` trains without compression."""

    data: str = ""
    model: str = "kgat"
    bits: int = 32
    group_size: int | None = None
    scheme: str = "auto"  # normal levels at 2 bits, uniform otherwise
    # the least widths of the embeddings the BPR scores read and of the L2-normalized outputs saved
    # (CompressionConfig's; this module stays free of torch, so the defaults are repeated: a test
    # checks they agree)
    score_bits: int = 8
    normalize_bits: int = 4
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
    patience: int = 5  # early stopping: evaluations without a better valid Recall@20
    max_batches_per_epoch: int | None = None  # cap for quick runs and tests
    # "neighbor": each CF step propagates over its batch's sampled `n_layers`-hop subgraph only,
    # `fanouts[i]` neighbors per node at layer i (-1 = all; None = DEFAULT_FANOUT per layer)
    sampler: str = "none"
    fanouts: tuple[int, ...] | None = None
    resume: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # model-specific knobs, logged as params

    def __post_init__(self) -> None:
        for name in self.field_names():
            object.__setattr__(self, name, _coerce(name, getattr(self, name)))
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError with a one-line fix for any invalid setting."""
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}: choose one of {', '.join(MODELS)}")
        if self.bits not in BITS:
            raise ConfigError(
                f"'bits' must be one of {', '.join(map(str, BITS))} (got {self.bits}); 32 means no compression"
            )
        for name in ("score_bits", "normalize_bits"):
            if getattr(self, name) not in BITS:
                raise ConfigError(
                    f"'{name}' must be one of {', '.join(map(str, BITS))} (got "
                    f"{getattr(self, name)}); 32 keeps those tensors exact"
                )
        if self.scheme not in SCHEMES:
            raise ConfigError(f"'scheme' must be one of {', '.join(SCHEMES)} (got {self.scheme!r})")
        if self.device not in DEVICES:
            raise ConfigError(f"'device' must be one of {', '.join(DEVICES)} (got {self.device!r})")
        positive = (
            "epochs", "batch_size", "kg_batch_size", "embed_dim", "eval_every",
            "eval_batch_users", "patience", "kg_neighbors", "n_intents",
        )  # fmt: skip
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(
                    f"'{name}' needs to be a positive integer (got {getattr(self, name)})"
                )
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
    def from_yaml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
        """Read a YAML mapping of settings; `overrides` (e.g. from the command line) win."""
        return cls.from_dict({**read_yaml_mapping(path), **(overrides or {})}, source=str(path))

    def with_overrides(self, **overrides: Any) -> TrainConfig:
        """A copy with some settings changed (validated)."""
        return self.from_dict({**self.to_dict(), **overrides})

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["eval_ks"] = list(self.eval_ks)
        values["fanouts"] = None if self.fanouts is None else list(self.fanouts)
        return values

    @property
    def compressed(self) -> bool:
        return self.bits != 32

    def compression_config(self) -> CompressionConfig:
        """How the activations of this run are saved (imported here: it pulls in torch)."""
        from tinykg_train.compress import CompressionConfig

        return CompressionConfig(
            bits=self.bits,
            group_size=self.group_size,
            scheme=self.scheme,
            score_bits=self.score_bits,
            normalize_bits=self.normalize_bits,
        )


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

    def wrong(expected: str) -> ConfigError:
        return ConfigError(f"'{name}' needs {expected} (got {value!r})")

    if name in INT_FIELDS or (name in OPTIONAL_INT_FIELDS and value is not None):
        return _as_int(value, wrong)
    if name in FLOAT_FIELDS:
        if isinstance(value, bool):
            raise wrong("a number")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise wrong("a number") from None
    if name in STR_FIELDS:
        if not isinstance(value, (str, Path)):
            raise wrong("a string")
        return str(value)
    if name == "resume":
        if not isinstance(value, bool):
            raise wrong("true or false")
        return value
    if name == "eval_ks":
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, int):
            items = [items]
        if not isinstance(items, (list, tuple)):
            raise wrong("a list of cut-offs like [20, 50]")
        return tuple(sorted({_as_int(k, wrong) for k in items}))
    if name == "fanouts" and value is not None:
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, int):
            items = [items]
        if not isinstance(items, (list, tuple)) or not items:
            raise wrong("a list of neighbor counts per layer like [10, 10] (-1 = all)")
        return tuple(_as_int(k, wrong) for k in items)
    if name == "extra":
        if not isinstance(value, dict):
            raise wrong("a mapping of model-specific settings")
        return dict(value)
    return value


def _as_int(value: Any, wrong) -> int:
    if isinstance(value, bool):
        raise wrong("an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise wrong("an integer") from None
    raise wrong("an integer")
