"""Each model's own hyperparameters, and the type of every model-specific knob (`extra`): torch-free.

`--model kgcn` trains with KGCN's settings (32 dims, one hop, no dropout), not with KGAT-like generic
ones, as RecBole loads a model's own settings. The layering, everywhere a run is configured
(`pipelines.train`, sweep trials, `TrainConfig.for_model`):

    TrainConfig defaults < MODEL_DEFAULTS[model] < --config FILE / a sweep's `train:` < flags / axes

`configs/<model>.yaml` hold the same values as documented examples (a test checks they agree). The
compression settings (`bits`, ...) are not per model: their defaults are global
(`compression_defaults`).

`KNOBS[model]` are the keys a model reads from `config.extra`, with their defaults and types. The
models take their `EXTRA_DEFAULTS` from here and `TrainConfig` checks `extra` with them when it is
built, so `--set independence_weight=1e-4` (which YAML reads as a string) becomes a float, and a
wrong value is a one-line error before anything is written, not a crash in the first step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tinykg_train.coercion import as_float, as_int, as_int_list, as_str, wrong
from tinykg_train.errors import ConfigError

#: The TrainConfig fields a model's defaults may set (the rest are per run, or global).
MODEL_FIELDS = (
    "lr", "l2", "batch_size", "kg_batch_size", "embed_dim", "n_layers", "dropout",
    "kg_neighbors", "n_intents",
)  # fmt: skip

#: Each model's hyperparameters (what its configs/<model>.yaml says).
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "kgat": {
        "lr": 1e-3, "l2": 1e-5, "batch_size": 1024, "kg_batch_size": 2048,
        "embed_dim": 64, "n_layers": 3, "dropout": 0.1,
    },
    "kgin": {
        "lr": 1e-3, "l2": 1e-5, "batch_size": 1024,
        "embed_dim": 64, "n_layers": 3, "dropout": 0.1, "n_intents": 4,
    },
    "kgcn": {
        "lr": 1e-3, "l2": 1e-5, "batch_size": 1024,
        "embed_dim": 32, "n_layers": 1, "dropout": 0.0, "kg_neighbors": 8,
    },
    "lightgcn": {
        "lr": 1e-3, "l2": 1e-4, "batch_size": 2048, "embed_dim": 64, "n_layers": 3, "dropout": 0.0,
    },
    "bprmf": {"lr": 1e-3, "l2": 1e-5, "batch_size": 2048, "embed_dim": 64},
}  # fmt: skip


@dataclass(frozen=True)
class Knob:
    """One model-specific setting: its default, its type and the values it accepts.

    `kind`: "float", "int", "int_list", "choice" (one of `choices`) or "path" (e.g. a run dir);
    `optional`: None is allowed; `minimum` (inclusive) and `below` (exclusive) bound numbers and
    the items of an int_list.
    """

    default: Any
    kind: str
    help: str
    optional: bool = False
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    below: float | None = None

    def coerce(self, key: str, value: Any) -> Any:
        """`value` in this knob's type, or a one-line ConfigError naming `key`."""
        label = f"'{key}' (in extra)"
        if value is None:
            if self.optional:
                return None
            raise wrong(label, self.expected(), value)
        if self.kind in ("float", "int"):
            read = as_float if self.kind == "float" else as_int
            try:
                number = read(value, label)
            except ConfigError:
                raise wrong(label, self.expected(), value) from None
            return self._bounded(label, number, value)
        if self.kind == "int_list":
            items = as_int_list(value, label, self.expected())
            for item in items:
                self._bounded(label, item, value)
            return items
        if self.kind == "choice":
            if value not in self.choices:
                raise wrong(label, self.expected(), value)
            return value
        if self.kind == "path":
            text = as_str(value, label)
            if not text.strip():
                raise wrong(label, self.expected(), value)
            return text
        raise AssertionError(f"knob kind {self.kind!r} has no coercion")

    def expected(self) -> str:
        """What the knob accepts, as the error messages and --help say it."""
        if self.kind == "choice":
            text = f"one of {', '.join(self.choices)}"
        else:
            text = {"float": "a number", "int": "an integer", "int_list": "a list of integers"}.get(
                self.kind, "a path"
            )
            if self.minimum is not None and self.below is not None:
                text += f" in [{self.minimum:g}, {self.below:g})"
            elif self.minimum is not None:
                text += f" >= {self.minimum:g}"
            if self.kind == "int_list":
                text += " like [64, 32, 16]"
        return text + (", or null" if self.optional else "")

    def _bounded(self, label: str, number: float, value: Any) -> Any:
        too_low = self.minimum is not None and number < self.minimum
        too_high = self.below is not None and number >= self.below
        if too_low or too_high:
            raise wrong(label, self.expected(), value)
        return number


#: The keys each model reads from `config.extra` (a model without knobs has none).
KNOBS: dict[str, dict[str, Knob]] = {
    "kgat": {
        "layer_dims": Knob(
            None, "int_list", "output size per layer (default: halve per layer, at least 8)",
            optional=True, minimum=1,
        ),
        "relation_dim": Knob(
            None, "int", "TransR relation size (default embed_dim)", optional=True, minimum=1
        ),
        "negative_slope": Knob(0.2, "float", "LeakyReLU slope of the bi-interaction aggregator"),
        "pretrained": Knob(
            None, "path", "a finished BPR-MF run dir: start users and items from its vectors",
            optional=True,
        ),
    },
    "kgin": {
        "independence": Knob(
            "distance", "choice", "intent independence measure", choices=("distance", "cosine")
        ),
        "independence_weight": Knob(1e-4, "float", "weight of the independence term", minimum=0),
        "edge_dropout": Knob(
            0.5, "float", "share of KG and interaction edges dropped per step", minimum=0, below=1
        ),
    },
    "kgcn": {},
    "lightgcn": {},
    "bprmf": {},
}  # fmt: skip


def model_defaults(model: str) -> dict[str, Any]:
    """A copy of `model`'s hyperparameters; an unknown model is a one-line ConfigError."""
    if model not in MODEL_DEFAULTS:
        raise ConfigError(f"unknown model {model!r}: choose one of {', '.join(MODEL_DEFAULTS)}")
    return dict(MODEL_DEFAULTS[model])


def extra_defaults(model: str) -> dict[str, Any]:
    """`model`'s knobs and their defaults (its `EXTRA_DEFAULTS`)."""
    return {key: knob.default for key, knob in KNOBS[model].items()}


def knob(key: str) -> Knob | None:
    """The knob named `key` (of whichever model reads it), or None."""
    return next((knobs[key] for knobs in KNOBS.values() if key in knobs), None)


def coerce_extra(extra: Any) -> dict[str, Any]:
    """`extra` with the value of every knob of a built-in model in its type (a wrong one raises a
    one-line ConfigError). Knobs of any model are accepted (a sweep over models may share one
    `extra`); each model reads its own. Other keys pass as they are: a model builder of your own may
    read them, and `models.build_model` refuses them (`check_extra_keys`)."""
    if not isinstance(extra, Mapping):
        raise wrong("'extra'", "a mapping of model-specific settings", extra)
    return {
        key: value if knob(key) is None else knob(key).coerce(key, value)
        for key, value in extra.items()
    }


def check_extra_keys(extra: Mapping[str, Any]) -> None:
    """Refuse keys of `extra` that no built-in model reads (a typo), naming the known ones."""
    unknown = sorted(str(key) for key in extra if knob(key) is None)
    if unknown:
        known = sorted(key for knobs in KNOBS.values() for key in knobs)
        raise ConfigError(
            f"unknown model setting(s) {', '.join(unknown)} in 'extra'; known: {', '.join(known)}"
        )
