"""TrainConfig: every setting of one training run, from defaults, a YAML file and CLI overrides.

One immutable dataclass shared by `pipelines.train`, the sweep trials and the models, so a run is fully
described by `config.to_dict()` (logged to MLflow and stored in checkpoints).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinykg_train.errors import ConfigError

MODELS = ("kgat", "kgin", "kgcn", "lightgcn", "bprmf")
BITS = (1, 2, 4, 8, 32)
DEVICES = ("auto", "cpu", "cuda")
SCHEMES = ("uniform", "normal")


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one run. `bits=32` trains without compression."""

    data: str = ""
    model: str = "kgat"
    bits: int = 32
    group_size: int | None = None
    scheme: str = "uniform"
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
    patience: int = 5  # early stopping: epochs without a better valid Recall@20
    max_batches_per_epoch: int | None = None  # cap for quick runs and tests
    resume: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # model-specific knobs, logged as params

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError with a one-line fix for any invalid setting."""
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}: choose one of {', '.join(MODELS)}")
        if self.bits not in BITS:
            raise ConfigError(f"'bits' must be one of {', '.join(map(str, BITS))} (got {self.bits}); 32 means no compression")
        if self.scheme not in SCHEMES:
            raise ConfigError(f"'scheme' must be one of {', '.join(SCHEMES)} (got {self.scheme!r})")
        if self.device not in DEVICES:
            raise ConfigError(f"'device' must be one of {', '.join(DEVICES)} (got {self.device!r})")
        positive = {
            "epochs": self.epochs, "batch_size": self.batch_size, "kg_batch_size": self.kg_batch_size,
            "embed_dim": self.embed_dim, "eval_every": self.eval_every, "eval_batch_users": self.eval_batch_users,
            "patience": self.patience, "kg_neighbors": self.kg_neighbors, "n_intents": self.n_intents,
        }
        for name, value in positive.items():
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"'{name}' needs to be a positive integer (got {value!r})")
        if self.n_layers < 0:
            raise ConfigError(f"'n_layers' needs to be >= 0 (got {self.n_layers})")
        if not self.lr > 0:
            raise ConfigError(f"'lr' needs to be > 0 (got {self.lr})")
        if self.l2 < 0:
            raise ConfigError(f"'l2' needs to be >= 0 (got {self.l2})")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"'dropout' needs to be in [0, 1) (got {self.dropout})")
        if not self.eval_ks or any(k <= 0 for k in self.eval_ks):
            raise ConfigError(f"'eval_ks' needs positive cut-offs, e.g. [20] (got {list(self.eval_ks)})")
        if self.group_size is not None and self.group_size <= 0:
            raise ConfigError(f"'group_size' needs to be a positive integer or null (got {self.group_size})")
        if self.max_batches_per_epoch is not None and self.max_batches_per_epoch <= 0:
            raise ConfigError(f"'max_batches_per_epoch' needs to be positive or null (got {self.max_batches_per_epoch})")

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> TrainConfig:
        """Build from a plain dict, rejecting unknown keys with the list of valid ones."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ConfigError(f"{source}: unknown setting(s) {', '.join(unknown)}; valid: {', '.join(cls.field_names())}")
        values = dict(values)
        if "eval_ks" in values:
            ks = values["eval_ks"]
            values["eval_ks"] = tuple(int(k) for k in (ks if isinstance(ks, (list, tuple)) else [ks]))
        return cls(**values)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
        """Read a YAML mapping of settings; `overrides` (e.g. from the command line) win."""
        import yaml

        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of setting: value, got {type(loaded).__name__}")
        return cls.from_dict({**loaded, **(overrides or {})}, source=str(path))

    def with_overrides(self, **overrides: Any) -> TrainConfig:
        """A copy with some settings changed (validated)."""
        return self.from_dict({**self.to_dict(), **overrides})

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["eval_ks"] = list(self.eval_ks)
        return values

    @property
    def compressed(self) -> bool:
        return self.bits != 32
