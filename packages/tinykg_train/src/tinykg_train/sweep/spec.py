"""SweepSpec: what a sweep runs, read from a YAML file and command-line overrides, checked up front.

A spec holds the training settings every trial shares (`train`), the swept settings (`axes`, see
space.py), how many times the grid is sampled, the resources of one trial, the concurrency and
optional ASHA early stopping. Everything is checked before Ray starts, so a bad setting is one line
on the command line, not a sweep of failed trials. The number of trials is the product of the grid
sizes times `num_samples`.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tinykg_train.config import read_yaml_mapping
from tinykg_train.errors import ConfigError
from tinykg_train.model_defaults import check_extra_keys
from tinykg_train.sweep.space import PER_SWEEP, Axis, check_settings, normalized_train, parse_axis

TOP_LEVEL_KEYS = (
    "name",
    "experiment",
    "train",
    "space",
    "num_samples",
    "search_seed",
    "resources",
    "max_concurrent",
    "asha",
    "model_builder",
)


@dataclass(frozen=True)
class Asha:
    """ASHA early stopping on valid Recall@20: trials are compared at epochs grace_period * factor^k."""

    grace_period: int = 1
    reduction_factor: int = 2


@dataclass(frozen=True)
class SweepSpec:
    """Everything that defines a sweep (its trials), plus how to run them."""

    name: str = "sweep"
    experiment: str = "tinykg-sweep"
    train: dict[str, Any] = field(default_factory=dict)
    axes: tuple[Axis, ...] = ()
    num_samples: int = 1
    search_seed: int = 0
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_concurrent: int | None = None
    asha: Asha | None = None
    model_builder: str | None = None  # "package.module:function", default tinykg_train.models

    def __post_init__(self) -> None:
        self.validate()

    # -- checks -------------------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise ConfigError with a one-line fix for anything that would make trials fail or hang."""
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ConfigError(
                f"'name' needs to be a plain folder name like bits-sweep (got {self.name!r})"
            )
        if not self.experiment:
            raise ConfigError("'experiment' needs to be a non-empty MLflow experiment name")
        self._validate_settings()
        self._validate_execution()
        if self.asha is not None:
            self._validate_asha(self.asha)
        if self.model_builder is not None:
            resolve_model_builder(self.model_builder)

    def _validate_settings(self) -> None:
        """Fixed settings valid, each swept once and not also fixed; cuda only with a GPU reserved."""
        fixed = sorted(set(self.train) & PER_SWEEP)
        if fixed:
            raise ConfigError(
                f"train: {', '.join(fixed)} cannot be set in a sweep config: pass the dataset with --data "
                "and the output folder with --out (every trial gets its own run dir)"
            )
        check_settings(self.train, "train")
        if self.model_builder is None:  # the built-in models read only their knobs
            check_extra_keys(self.train.get("extra") or {})
        names = [axis.name for axis in self.axes]
        if len(set(names)) != len(names):
            raise ConfigError(f"space: a setting is swept twice ({', '.join(names)})")
        both = sorted(set(names) & set(self.train))
        if both:
            raise ConfigError(
                f"{', '.join(both)}: set both as a fixed train setting and as a swept axis; keep one"
            )
        device_axis = self.axis("device")
        devices = set(device_axis.values) if device_axis else {self.fixed_or_default("device")}
        if "cuda" in devices and not self.gpus_per_trial > 0:
            raise ConfigError(
                "device cuda needs a GPU reserved per trial: set resources.gpu (--gpus-per-trial), "
                "e.g. 0.5 to share one GPU between two trials"
            )

    def _validate_execution(self) -> None:
        """Samples, seed, resources and concurrency."""
        if not _is_int(self.num_samples) or self.num_samples <= 0:
            raise ConfigError(
                f"'num_samples' needs to be a positive integer (got {self.num_samples!r})"
            )
        if not _is_int(self.search_seed):
            raise ConfigError(f"'search_seed' needs to be an integer (got {self.search_seed!r})")
        if not self.cpus_per_trial > 0:
            raise ConfigError(f"'resources.cpu' needs to be > 0 (got {self.cpus_per_trial})")
        if not self.gpus_per_trial >= 0:
            raise ConfigError(f"'resources.gpu' needs to be >= 0 (got {self.gpus_per_trial})")
        if self.max_concurrent is not None and (
            not _is_int(self.max_concurrent) or self.max_concurrent <= 0
        ):
            raise ConfigError(
                f"'max_concurrent' needs to be a positive integer or null (got {self.max_concurrent!r})"
            )

    def _validate_asha(self, asha: Asha) -> None:
        for name, least in (("grace_period", 1), ("reduction_factor", 2)):
            value = getattr(asha, name)
            if not _is_int(value) or value < least:
                raise ConfigError(
                    f"'asha.{name}' needs to be an integer >= {least} (got {value!r})"
                )
        if asha.grace_period > self.max_epochs:
            raise ConfigError(
                f"'asha.grace_period' ({asha.grace_period}) needs to be <= epochs ({self.max_epochs}): "
                "trials are compared after grace_period epochs"
            )
        every = self.fixed_or_default("eval_every")
        if asha.grace_period % every:
            raise ConfigError(
                f"'asha.grace_period' ({asha.grace_period}) needs to be a multiple of eval_every ({every}): "
                "ASHA compares valid Recall@20, which exists only on evaluated epochs"
            )

    # -- derived values --------------------------------------------------------------------------------

    def fixed_or_default(self, name: str) -> Any:
        return check_settings(self.train, "train").to_dict()[name]

    @property
    def max_epochs(self) -> int:
        axis = self.axis("epochs")
        return int(axis.highest()) if axis is not None else int(self.fixed_or_default("epochs"))

    @property
    def max_workers(self) -> int:
        """The most data-parallel workers any trial uses."""
        axis = self.axis("workers")
        return int(axis.highest()) if axis is not None else int(self.fixed_or_default("workers"))

    def axis(self, name: str) -> Axis | None:
        return next((axis for axis in self.axes if axis.name == name), None)

    @property
    def n_trials(self) -> int:
        return math.prod(axis.grid_size for axis in self.axes) * self.num_samples

    def param_space(self) -> dict[str, Any]:
        """The Tune `param_space`: one entry per axis (fixed settings travel with each trial)."""
        return {axis.name: axis.to_tune() for axis in self.axes}

    def describe(self) -> str:
        axes = ", ".join(axis.describe() for axis in self.axes) or "no swept settings"
        return (
            f"sweep {self.name!r}: {self.n_trials} trial(s) ({axes}; {self.num_samples} sample(s)), "
            f"{self.cpus_per_trial:g} CPU + {self.gpus_per_trial:g} GPU per trial, "
            f"{self.max_concurrent or 'as many as fit'} at a time"
            + (
                f", ASHA grace {self.asha.grace_period} factor {self.asha.reduction_factor}"
                if self.asha
                else ""
            )
        )

    # -- (de)serialization -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (JSON/YAML-safe) that `from_dict` turns back into an equal spec."""
        return {
            "name": self.name,
            "experiment": self.experiment,
            "train": dict(self.train),
            "axes": [axis.to_dict() for axis in self.axes],
            "num_samples": self.num_samples,
            "search_seed": self.search_seed,
            "cpus_per_trial": self.cpus_per_trial,
            "gpus_per_trial": self.gpus_per_trial,
            "max_concurrent": self.max_concurrent,
            "asha": dataclasses.asdict(self.asha) if self.asha else None,
            "model_builder": self.model_builder,
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SweepSpec:
        values = dict(values)
        values["axes"] = tuple(
            Axis(a["name"], a["kind"], tuple(a["values"])) for a in values["axes"]
        )
        values["asha"] = Asha(**values["asha"]) if values.get("asha") else None
        return cls(**values)

    def trial_defining(self) -> dict[str, Any]:
        """The parts that decide which trials run (a resumed sweep must keep them)."""
        values = self.to_dict()
        return {
            k: values[k]
            for k in ("train", "axes", "num_samples", "search_seed", "model_builder", "asha")
        }


# -- building a spec --------------------------------------------------------------------------------


def resolve_model_builder(reference: str) -> Callable[..., Any]:
    """Import `package.module:function` (a `build_model(name, dataset, config)` replacement)."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ConfigError(
            f"'model_builder' needs the form package.module:function (got {reference!r})"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"'model_builder' {reference!r}: cannot import {module_name} ({exc})"
        ) from None
    builder = getattr(module, attribute, None)
    if not callable(builder):
        raise ConfigError(
            f"'model_builder' {reference!r}: {module_name} has no function {attribute}"
        )
    return builder


def spec_from_mapping(values: Mapping[str, Any], source: str = "sweep config") -> SweepSpec:
    """A SweepSpec from the YAML layout (`train:`, `space:`, `resources: {cpu, gpu}`, `asha:` ...)."""
    unknown = sorted(set(values) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ConfigError(
            f"{source}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(TOP_LEVEL_KEYS)}"
        )
    train = normalized_train(mapping_or_empty(values.get("train"), f"{source}: train"), source)
    space = mapping_or_empty(values.get("space"), f"{source}: space")
    resources = mapping_or_empty(values.get("resources"), f"{source}: resources")
    extra = sorted(set(resources) - {"cpu", "gpu"})
    if extra:
        raise ConfigError(
            f"{source}: resources: unknown key(s) {', '.join(extra)}; valid: cpu, gpu"
        )
    asha = values.get("asha")
    if asha is not None:
        asha_values = mapping_or_empty(asha, f"{source}: asha")
        bad = sorted(set(asha_values) - {"grace_period", "reduction_factor"})
        if bad:
            raise ConfigError(
                f"{source}: asha: unknown key(s) {', '.join(bad)}; valid: grace_period, reduction_factor"
            )
        asha = Asha(**asha_values)
    return SweepSpec(
        name=str(values.get("name", "sweep")),
        experiment=str(values.get("experiment", "tinykg-sweep")),
        train=dict(train),
        axes=tuple(parse_axis(name, value, train) for name, value in space.items()),
        num_samples=values.get("num_samples", 1),
        search_seed=values.get("search_seed", 0),
        cpus_per_trial=_number(resources.get("cpu", 1), "resources.cpu"),
        gpus_per_trial=_number(resources.get("gpu", 0), "resources.gpu"),
        max_concurrent=values.get("max_concurrent"),
        asha=asha,
        model_builder=values.get("model_builder"),
    )


def load_spec(path: str | None) -> dict[str, Any]:
    """The YAML mapping of a sweep config file ({} without a file)."""
    return read_yaml_mapping(path) if path else {}


def mapping_or_empty(value: Any, where: str) -> Mapping[str, Any]:
    """`value` as a mapping (None is empty); anything else is a one-line ConfigError."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping of setting: value (got {value!r})")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"'{where}' needs a number (got {value!r})")
    return float(value)
