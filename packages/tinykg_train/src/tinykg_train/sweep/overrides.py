"""Command-line overrides of a sweep config: `--bits 2,32` (a grid axis), `--set KEY=VALUE`, `--epochs 5`.

They edit the YAML mapping before it becomes a `SweepSpec`, so the file and the flags go through the
same checks. A comma list of two or more values becomes a grid axis; a single value becomes a fixed
setting; either replaces whatever the file said about that setting. `--set` values are read as YAML
(as `pipelines.train --set`), and a model-specific key (`--set independence_weight=1e-4`) goes into
`train: extra:`, where TrainConfig checks its type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tinykg_train.config import TrainConfig
from tinykg_train.errors import ConfigError
from tinykg_train.model_defaults import knob
from tinykg_train.sweep.spec import mapping_or_empty as _mapping


def split_list(text: str, flag: str) -> list[str]:
    """ "2,32" -> ["2", "32"]; empty items are an error."""
    items = [item.strip() for item in str(text).split(",")]
    if not items or any(not item for item in items):
        raise ConfigError(f"{flag}: expected a value or a comma list like 2,32 (got {text!r})")
    return items


def parse_assignment(text: str) -> tuple[str, Any]:
    """ "batch_size=256" -> ("batch_size", 256): the value read as YAML (TrainConfig coerces it)."""
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise ConfigError(f"--set: expected KEY=VALUE like batch_size=256 (got {text!r})")
    try:
        return key.strip(), yaml.safe_load(value.strip())
    except yaml.YAMLError:
        raise ConfigError(f"--set {key.strip()}: {value.strip()!r} is not a valid value") from None


def apply_overrides(
    values: Mapping[str, Any],
    *,
    axes: Mapping[str, str | None] = (),
    settings: Sequence[str] = (),
    top: Mapping[str, Any] = (),
) -> dict[str, Any]:
    """A copy of the YAML mapping `values` with the command line applied.

    `axes`: setting -> comma list text (None: not given), e.g. {"bits": "2,32", "lr": None};
    `settings`: `KEY=VALUE` texts for fixed train settings; `top`: top-level keys (None: not given),
    e.g. {"max_concurrent": 2, "name": None}; `resources.cpu`/`resources.gpu` go into `resources`.
    """
    result = dict(values)
    train = dict(_mapping(result.get("train"), "train"))
    space = dict(_mapping(result.get("space"), "space"))

    def fix(name: str, value: Any) -> None:
        train[name] = value
        space.pop(name, None)

    for name, text in dict(axes).items():
        if text is None:
            continue
        items = split_list(text, f"--{name.replace('_', '-')}")
        if len(items) == 1:
            fix(name, items[0])
        else:
            space[name] = items
            train.pop(name, None)
    for text in settings:
        key, value = parse_assignment(text)
        if key not in TrainConfig.field_names() and knob(key) is not None:
            train["extra"] = {**_mapping(train.get("extra"), "train.extra"), key: value}
        else:
            fix(key, value)
    resources = dict(_mapping(result.get("resources"), "resources"))
    for key, value in dict(top).items():
        if value is None:
            continue
        if key.startswith("resources."):
            resources[key.split(".", 1)[1]] = value
        elif key == "epochs":
            fix("epochs", value)
        elif key == "asha":
            if value is False:
                result["asha"] = None
            elif not result.get("asha"):
                result["asha"] = {}
        else:
            result[key] = value
    result.update(train=train, space=space)
    if resources:
        result["resources"] = resources
    return result
