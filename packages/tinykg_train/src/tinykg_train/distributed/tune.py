"""Tune + Train: a sweep trial with `workers: N` is the driver of its own Ray Train run.

This is Ray 2.60's pattern for tuning distributed runs (Ray Train V2): the Tune trial function
builds a `TorchTrainer` and waits for it, and a callback on the Train run forwards the workers'
reports to the trial. `TuneEpochReports` forwards rank 0's epoch reports the way a single-process
trial's `TuneReporter` would (numeric, `epoch` counted from 1, nothing before the first evaluation,
the last epoch held back); the trial itself reports the final result with the test metrics once
the Train run has finished.
"""

from __future__ import annotations

from typing import Any

from ray.train import UserCallback

from tinykg_train.sweep.reporting import TuneReporter


class TuneEpochReports(UserCallback):
    """Forwards rank 0's `ray.train.report` metrics to the Tune trial, as `TuneReporter` would."""

    def __init__(self, epochs: int) -> None:
        from ray.tune.integration.ray_train import TuneReportCallback

        self.epochs = epochs
        self.forward = TuneReportCallback()  # Ray's bridge into the trial's result queue

    def after_report(self, run_context, metrics: list[dict[str, Any]], checkpoint) -> None:
        def send(values: dict[str, float]) -> None:
            self.forward.after_report(run_context, [values], checkpoint)

        TuneReporter(self.epochs, report=send).on_epoch(metrics[0])
