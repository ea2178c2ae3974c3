"""Ray Tune sweeps over training settings, every trial an MLflow run under one parent run.

`python -m pipelines.sweep` is the command line; `run_sweep(spec, data, out)` the Python entry point.
Parts: `spec` (the sweep's settings, checked up front), `space` (swept settings, grid or random),
`reporting` (epoch reports to Tune), `overrides` (command-line edits),
`trial` (one trial = `trainer.train` + Tune reports + an MLflow child run), `cluster` (which Ray),
`mlflow_runs` (experiment, parent, settling leftover runs), `summary` and `pareto` (the results),
`outcome` (reconciling Tune and MLflow at the end), `driver` (all of it in order).
"""

from tinykg_train.sweep.driver import run_sweep
from tinykg_train.sweep.outcome import SweepOutcome
from tinykg_train.sweep.pareto import pareto_front
from tinykg_train.sweep.space import Axis
from tinykg_train.sweep.spec import Asha, SweepSpec, spec_from_mapping

__all__ = [
    "Asha",
    "Axis",
    "SweepOutcome",
    "SweepSpec",
    "pareto_front",
    "run_sweep",
    "spec_from_mapping",
]
