"""Reading a setting's value as its type: YAML reads `1e-3` as a string, a CLI gives text.

Each function returns the value in the wanted type or raises a one-line `ConfigError` that names the
setting (`label`, already quoted, e.g. "'epochs'") and what it needs. Booleans are never numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinykg_train.errors import ConfigError


def wrong(label: str, expected: str, value: Any) -> ConfigError:
    return ConfigError(f"{label} needs {expected} (got {value!r})")


def as_int(value: Any, label: str) -> int:
    """An integer: ints, integral floats (3.0) and integer text ("3")."""
    if isinstance(value, bool):
        raise wrong(label, "an integer", value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise wrong(label, "an integer", value) from None
    raise wrong(label, "an integer", value)


def as_float(value: Any, label: str) -> float:
    """A number: ints, floats and number text ("1e-4")."""
    if isinstance(value, bool):
        raise wrong(label, "a number", value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise wrong(label, "a number", value) from None


def as_str(value: Any, label: str) -> str:
    """Text (a `Path` becomes its text)."""
    if not isinstance(value, (str, Path)):
        raise wrong(label, "a string", value)
    return str(value)


def as_bool(value: Any, label: str) -> bool:
    if not isinstance(value, bool):
        raise wrong(label, "true or false", value)
    return value


def as_int_list(
    value: Any, label: str, expected: str = "a list of integers like [20, 50]"
) -> list[int]:
    """A list of integers from a list, a single integer, or comma text ("20,50")."""
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, int) and not isinstance(items, bool):
        items = [items]
    if not isinstance(items, (list, tuple)):
        raise wrong(label, expected, value)
    try:
        return [as_int(item, label) for item in items]
    except ConfigError:
        raise wrong(label, expected, value) from None
