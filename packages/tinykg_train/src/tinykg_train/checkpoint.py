"""Checkpoints that load with `torch.load(..., weights_only=True)` and survive a kill -9.

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts only (that is what
`weights_only=True` accepts), so the RNG states of Python and NumPy are converted to tensors and
plain types here. Files are written to a temporary sibling, fsynced and renamed: a run killed while
saving keeps its previous checkpoint intact.
"""

from __future__ import annotations

import pickle
import random
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tinykg_train.errors import TinyKGError
from tinykg_train.run_dir import write_atomic

CHECKPOINT_VERSION = 1


# -- random number generators -------------------------------------------------------------------


def capture_rng_state() -> dict[str, Any]:
    """The states of torch (CPU and every CUDA device), NumPy's global and Python's `random`."""
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {
            "name": str(np_name),
            "keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "python": {
            "version": int(py_version),
            "state": torch.tensor(py_state, dtype=torch.int64),
            "gauss_next": py_gauss,
        },
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back what `capture_rng_state` returned (CUDA states only where the devices exist)."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["name"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    py_state = state["python"]
    random.setstate(
        (
            py_state["version"],
            tuple(int(v) for v in py_state["state"].tolist()),
            py_state["gauss_next"],
        )
    )


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), NumPy's global generator and Python's `random`."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


# -- files --------------------------------------------------------------------------------------


def save_checkpoint(path: Path, state: dict[str, Any]) -> Path:
    """Write `state` (plain types and tensors only) atomically to `path`."""
    payload = {"checkpoint_version": CHECKPOINT_VERSION, **state}
    return write_atomic(path, lambda tmp: torch.save(payload, tmp))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint with `weights_only=True`; an unreadable file is a TinyKGError naming it.

    Everything is loaded onto the CPU: RNG states must stay CPU tensors, and `load_state_dict` of
    the model and the optimizer copies weights onto the parameters' device.
    """
    path = Path(path)
    if not path.is_file():
        raise TinyKGError(f"{path}: no checkpoint to resume from")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, zipfile.BadZipFile, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TinyKGError(
            f"{path}: unreadable checkpoint ({first}); delete it to start over"
        ) from None
    if not isinstance(state, dict) or state.get("checkpoint_version") != CHECKPOINT_VERSION:
        found = state.get("checkpoint_version") if isinstance(state, dict) else type(state).__name__
        raise TinyKGError(
            f"{path}: checkpoint version {found!r}, this trainer reads {CHECKPOINT_VERSION}; delete it to start over"
        )
    return state
