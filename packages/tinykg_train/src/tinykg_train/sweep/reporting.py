"""Per-epoch reports from `trainer.train` to Ray Tune, and what happens when Tune stops a trial.

Tune's `tune.report` blocks until the driver has looked at the result; when the driver decided to
stop the trial (ASHA), it raises `SystemExit` in the training thread and the worker is torn down
moments later. Two consequences shape this module:

- The last epoch's report is held back until `train` has finished (test ranking, metrics.json, the
  MLflow run closed) and then sent with the test metrics, so a scheduler decision on the final result
  can no longer cut a finished trial short.
- A stop on an earlier epoch becomes `StoppedByScheduler`, which the trial turns into an MLflow run
  KILLED with `stopped_by=asha` instead of a failure.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from typing import Any

from tinykg_train.training_state import STOP_METRIC  # valid recall@20, as early stopping


class StoppedByScheduler(Exception):
    """Tune's scheduler stopped this trial early (raised out of `on_epoch` through the trainer)."""


def tune_metrics(report: Mapping[str, Any]) -> dict[str, float] | None:
    """The numeric, finite part of an epoch report, `epoch` counted from 1; None before the first
    evaluation (Tune's schedulers need valid Recall@20 in every result)."""
    if not isinstance(report.get(STOP_METRIC), (int, float)):
        return None
    metrics = {
        key: float(value)
        for key, value in report.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    }
    metrics["epoch"] = int(report["epoch"]) + 1
    return metrics


class TuneReporter:
    """`on_epoch` for `trainer.train` that reports to Tune, holding the last epoch back for `final`."""

    def __init__(
        self, epochs: int, report: Callable[[dict[str, float]], None] | None = None
    ) -> None:
        self.epochs = epochs
        self._report = report
        self.held: dict[str, float] | None = None

    def report(self, metrics: dict[str, float]) -> None:
        if self._report is None:
            from ray import tune

            self._report = tune.report
        self._report(metrics)

    def on_epoch(self, report: Mapping[str, Any]) -> None:
        metrics = tune_metrics(report)
        if metrics is None:
            return
        if metrics["epoch"] >= self.epochs or report.get("stopped_early"):
            self.held = metrics  # the run's last epoch: sent by `final` once training has finished
            return
        try:
            self.report(metrics)
        except SystemExit:  # Tune's way of stopping a trial from inside `tune.report`
            raise StoppedByScheduler(
                f"stopped by the scheduler after epoch {metrics['epoch']}"
            ) from None

    def final(self, result: Mapping[str, Any]) -> None:
        """Report the last epoch with the test metrics of the finished run (`train`'s result)."""
        metrics = dict(self.held or {})
        if not metrics:  # resumed after its last epoch: only finish() was left to do
            best = result.get("best_valid") or {}
            metrics = {k: float(v) for k, v in best.items() if isinstance(v, (int, float))}
            metrics["epoch"] = int(result.get("epochs_trained") or self.epochs)
        for key, value in result.items():
            if key.startswith(("recall@", "ndcg@")) and isinstance(value, (int, float)):
                metrics[f"test_{key}"] = float(value)
        if STOP_METRIC not in metrics:
            return  # Tune refuses results without the metric its scheduler watches
        with contextlib.suppress(SystemExit):  # a stop decision on the last result changes nothing
            self.report(metrics)
