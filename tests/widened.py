"""Copies of the loaders and samplers with every held integer array widened to int64: what they
held before those arrays were narrowed (`kg_data.index_dtype`), to compare draws against."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np


def widened(holder: Any) -> Any:
    """A deep copy of `holder` (its generators' states included) whose integer arrays, its own and
    those of the kg_data objects it holds (a loader's sampler, a KG sampler's excluding samplers),
    are int64."""
    wide = copy.deepcopy(holder)
    for _, owner, name, array in _int_arrays(wide):
        setattr(owner, name, array.astype(np.int64))
    return wide


def widened_items(split_items: dict) -> dict:
    """An evaluator's `split_items` (split -> `UserItems`) with indptr and items in int64."""
    from tinykg_train.evaluate import UserItems

    return {
        split: UserItems(table.indptr.astype(np.int64), table.items.astype(np.int64))
        for split, table in split_items.items()
    }


def int_array_dtypes(holder: Any) -> dict[str, np.dtype]:
    """The dtype of every integer array that `holder` and the kg_data objects it holds keep, by
    attribute path (e.g. "negatives._excluding._keys")."""
    return {path: array.dtype for path, _, _, array in _int_arrays(holder)}


def _int_arrays(holder: Any, prefix: str = "") -> Iterator[tuple[str, Any, str, np.ndarray]]:
    """(path, owner, attribute name, array) of each integer array under `holder`."""
    for name, value in vars(holder).items():
        if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
            yield prefix + name, holder, name, value
        elif type(value).__module__.startswith("kg_data") and hasattr(value, "__dict__"):
            yield from _int_arrays(value, f"{prefix}{name}.")
