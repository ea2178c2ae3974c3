"""The swept settings of a sweep: one `Axis` per setting, parsed from YAML and checked value by value.

Axis forms (YAML `space:` entries; a CLI comma list such as `--bits 2,32` is a grid axis):

    bits: [2, 32]                       grid: every value is run (with every value of the other grids)
    embed_dim: {choice: [32, 64]}       random: one value drawn per sample
    lr: {loguniform: [1.0e-4, 1.0e-2]}  random float, log-uniform in [low, high)
    dropout: {uniform: [0.0, 0.3]}      random float, uniform in [low, high)
    n_layers: {randint: [1, 4]}         random integer in [low, high)

Every listed value (and each range's ends) goes through `TrainConfig`, so a value that would make a
trial fail is refused before Ray starts, with the same one-line message `pipelines.train` gives.
Each trial's settings sit on its model's own defaults (`TrainConfig.layered`): a `model` axis gives
every trial its model's hyperparameters unless `train:` or another axis sets them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tinykg_train.config import FLOAT_FIELDS, INT_FIELDS, OPTIONAL_INT_FIELDS, TrainConfig
from tinykg_train.errors import ConfigError

RANDOM_KINDS = ("choice", "uniform", "loguniform", "randint")
# Settings that belong to the sweep as a whole (--data) or to each trial (its own run dir).
PER_SWEEP = frozenset({"data", "out", "resume"})
NOT_SWEEPABLE = PER_SWEEP | {"extra"}


def check_settings(settings: Mapping[str, Any], source: str) -> TrainConfig:
    """The TrainConfig a trial with `settings` gets (its model's defaults underneath; a placeholder
    dataset): raises the one-line ConfigError."""
    return TrainConfig.layered({**settings, "data": settings.get("data") or "?"}, source=source)


@dataclass(frozen=True)
class Axis:
    """One swept setting: a grid of values, a random choice, or a random range."""

    name: str
    kind: str
    values: tuple[Any, ...]  # grid/choice: the values; uniform/loguniform/randint: (low, high)

    @property
    def grid_size(self) -> int:
        return len(self.values) if self.kind == "grid" else 1

    def to_tune(self) -> Any:
        """The Tune search-space object of this axis."""
        from ray import tune

        if self.kind == "grid":
            return tune.grid_search(list(self.values))
        if self.kind == "choice":
            return tune.choice(list(self.values))
        return getattr(tune, self.kind)(*self.values)

    def highest(self) -> Any:
        """The largest value this axis can take (for ASHA's max epochs)."""
        if self.kind == "randint":
            return self.values[1] - 1
        return max(self.values)

    def describe(self) -> str:
        if self.kind == "grid":
            return f"{self.name}={list(self.values)}"
        return f"{self.name}~{self.kind}{list(self.values)}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "values": list(self.values)}


def parse_axis(name: str, value: Any, train: Mapping[str, Any], source: str = "space") -> Axis:
    """An Axis from a YAML value (a list = grid, `{kind: [...]}` = random), each value checked."""
    where = f"{source}.{name}"
    if name not in TrainConfig.field_names():
        raise ConfigError(f"{where}: unknown setting; sweepable: {', '.join(sweepable_settings())}")
    if name in NOT_SWEEPABLE:
        raise ConfigError(f"{where}: cannot be swept; sweepable: {', '.join(sweepable_settings())}")
    if isinstance(value, (list, tuple)):
        return Axis(name, "grid", _checked_values(name, value, train, where))
    if isinstance(value, Mapping) and len(value) == 1:
        ((kind, args),) = value.items()
        if kind == "choice":
            return Axis(name, "choice", _checked_values(name, args, train, f"{where}.choice"))
        if kind in RANDOM_KINDS:
            return Axis(name, kind, _checked_range(name, kind, args, train, where))
    raise ConfigError(
        f"{where}: expected a list of values (grid) or one of "
        f"{{choice: [...]}}, {{uniform: [low, high]}}, {{loguniform: [low, high]}}, {{randint: [low, high]}} (got {value!r})"
    )


def sweepable_settings() -> list[str]:
    return [name for name in TrainConfig.field_names() if name not in NOT_SWEEPABLE]


def _checked_values(
    name: str, values: Any, train: Mapping[str, Any], where: str
) -> tuple[Any, ...]:
    if not isinstance(values, (list, tuple)) or not values:
        raise ConfigError(f"{where}: needs a non-empty list of values (got {values!r})")
    checked = tuple(getattr(check_settings({**train, name: v}, where), name) for v in values)
    if len(set(map(repr, checked))) != len(checked):
        raise ConfigError(f"{where}: the same value is listed twice ({list(values)})")
    return checked


def _checked_range(
    name: str, kind: str, args: Any, train: Mapping[str, Any], where: str
) -> tuple[Any, Any]:
    where = f"{where}.{kind}"
    numeric = (int, float)
    if (
        not isinstance(args, (list, tuple))
        or len(args) != 2
        or not all(isinstance(a, numeric) and not isinstance(a, bool) for a in args)
    ):
        raise ConfigError(f"{where}: needs [low, high] numbers (got {args!r})")
    low, high = args
    if kind == "randint":
        if name not in (INT_FIELDS | OPTIONAL_INT_FIELDS):
            raise ConfigError(
                f"{where}: randint needs an integer setting; use choice or uniform for {name}"
            )
        if not all(isinstance(a, int) for a in args) or low >= high:
            raise ConfigError(
                f"{where}: needs integers low < high, high excluded (got {list(args)})"
            )
        check_settings({**train, name: low}, where)
        check_settings({**train, name: high - 1}, where)
        return int(low), int(high)
    if name not in FLOAT_FIELDS:
        raise ConfigError(
            f"{where}: {kind} draws floats but {name} is not a float setting; use choice or randint"
        )
    if not low < high:
        raise ConfigError(f"{where}: needs low < high (got {list(args)})")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{where}: loguniform needs low > 0 (got {low})")
    check_settings({**train, name: low}, where)
    return float(low), float(high)


def normalized_train(train: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The fixed settings with their values coerced to the fields' types ("256" -> 256)."""
    values = check_settings(train, f"{source}: train").to_dict()
    return {name: values[name] for name in train}
