"""The files of one run directory, and atomic writes so a killed run never leaves half a file.

RUN_DIR/
  checkpoint.pt            last finished epoch: weights, optimizer, RNG states, history
  best_model_epochN.pt     the best valid epoch's weights (N: that epoch), tested at the end
  config.yaml              the run's TrainConfig
  metrics.json             final test metrics of the best epoch, histories, memory (written at the end)
  activation_memory.csv    bytes autograd held for backward in one training step, per module
  activation_memory.png    the same as a bar chart
  mlflow_run.json          the MLflow run this dir logs to (lets --resume continue the same run)
  workers.json, ray_train/ data-parallel runs only: where the workers ran, Ray Train's storage
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml


class RunDir:
    """Paths inside one run directory."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    checkpoint = property(lambda self: self.path / "checkpoint.pt")
    config = property(lambda self: self.path / "config.yaml")
    metrics = property(lambda self: self.path / "metrics.json")
    activation_table = property(lambda self: self.path / "activation_memory.csv")
    activation_chart = property(lambda self: self.path / "activation_memory.png")
    mlflow_run = property(lambda self: self.path / "mlflow_run.json")

    def best_model(self, epoch: int) -> Path:
        """The weights of the best valid epoch `epoch` (`tinykg_train.best_weights`)."""
        return self.path / f"best_model_epoch{epoch}.pt"

    def create(self) -> RunDir:
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"


def write_atomic(path: Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp)` on a temporary sibling of `path`, fsync it, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text))


def write_json_atomic(path: Path, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def write_yaml_atomic(path: Path, data: Any) -> Path:
    return write_text_atomic(path, yaml.safe_dump(data, sort_keys=False))
