"""python -m pipelines.sweep --data DIR [--config configs/sweep.yaml] [overrides]: a Ray Tune sweep.

Every trial runs `tinykg_train.trainer.train` (the function `pipelines.train` runs) and is one MLflow
run under the sweep's parent run. Without a cluster the trials run on a private local Ray; inside
`ray job submit ... -- python -m pipelines.sweep ...` they run on the job's cluster. At the end a
summary table is printed and, with a Pareto chart of activation memory vs Recall@20, logged to the
parent run. Exit status: 0 if any trial finished, 1 if every trial failed, 2 for bad input, 130 when
interrupted (continue with the same command plus --resume).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pipelines._cli import prog_name, run_cli
from tinykg_train.compression_defaults import BITS

AXIS_FLAGS = ("model", "bits", "memory_budget", "lr", "seed", "embed_dim", "n_layers", "partitions")

# (flag, key of the sweep config it overrides, type, metavar, help); `resources.cpu` goes into
# `resources:`. Not given (None) leaves the config's value.
SPEC_FLAGS: list[tuple[str, str, type, str, str]] = [
    ("--epochs", "epochs", str, "N", "epochs per trial (ASHA's maximum too)"),
    ("--name", "name", str, "NAME", "sweep name: folder under --out and MLflow parent run name (default from the config, else 'sweep')"),
    ("--experiment", "experiment", str, "NAME", "MLflow experiment (default from the config, else tinykg-sweep)"),
    ("--num-samples", "num_samples", int, "N", "samples of the search space (the grid is repeated N times)"),
    ("--max-concurrent", "max_concurrent", int, "N", "trials running at the same time (default: as many as the resources allow)"),
    ("--cpus-per-trial", "resources.cpu", float, "N", "CPUs reserved per trial (default 1)"),
    ("--gpus-per-trial", "resources.gpu", float, "N", "GPUs reserved per trial, fractions allowed (default 0)"),
    ("--model-builder", "model_builder", str, "MODULE:FUNCTION", "build models with your own build_model(name, dataset, config) (default tinykg_train.models)"),
]  # fmt: skip

# (flag, type, metavar, help): where the sweep reads, tracks and runs (arguments of run_sweep).
RUN_FLAGS: list[tuple[str, type, str, str]] = [
    ("--tracking-uri", str, "URI", "MLflow tracking URI (default $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db)"),
    ("--address", str, "ADDR", "Ray cluster to join (default: the job's cluster under ray job submit, else a private local Ray)"),
    ("--num-cpus", int, "N", "CPUs of the private local Ray (default: all)"),
    ("--num-gpus", int, "N", "GPUs of the private local Ray (default: all it sees)"),
]  # fmt: skip


def dest(flag: str) -> str:
    """The argparse attribute of a flag: "--cpus-per-trial" -> "cpus_per_trial"."""
    return flag.removeprefix("--").replace("-", "_")


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (exit status 2), like every other input error."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=prog_name("sweep"),
        description="Sweep models, bit widths and hyper-parameters with Ray Tune; compare the trials in MLflow.",
        epilog="A comma list (--bits 2,32) is a grid axis; one value fixes the setting. "
        "Examples: python -m pipelines.sweep --data data/lfm1m --config configs/sweep.yaml; "
        "python -m pipelines.sweep --data data/lfm1m --model kgat,lightgcn --bits 2,32 --seed 0,1 --epochs 20",
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="dataset dir written by pipelines.ingest (required unless --resume)",
    )
    parser.add_argument(
        "--config", metavar="YAML", help="sweep config (see configs/sweep.yaml); flags override it"
    )
    group = parser.add_argument_group("sweep settings (override the config)")
    for name in AXIS_FLAGS:
        group.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            metavar="V[,V...]",
            help=f"{name}: one value or a comma list (grid)"
            + (
                f"; widths {', '.join(map(str, BITS))} (32 = uncompressed)"
                if name == "bits"
                else ""
            ),
        )
    for flag, _, kind, metavar, text in SPEC_FLAGS:
        group.add_argument(flag, type=kind, metavar=metavar, help=text)
    group.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fix any training setting, e.g. --set batch_size=1024 (repeatable)",
    )
    group.add_argument(
        "--asha",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ASHA early stopping on valid recall@20 (settings from the config's asha:, else grace 1, factor 2)",
    )
    group = parser.add_argument_group("where it runs")
    group.add_argument(
        "--out",
        default="runs/sweeps",
        metavar="DIR",
        help="where sweeps are stored: DIR/<name> (default runs/sweeps)",
    )
    group.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted sweep DIR/<name> (same options as the first time)",
    )
    for flag, kind, metavar, text in RUN_FLAGS:
        group.add_argument(flag, type=kind, metavar=metavar, help=text)
    return parser


def spec_from_args(args: argparse.Namespace):
    """The SweepSpec of the config file with the command line applied."""
    from tinykg_train.sweep.overrides import apply_overrides
    from tinykg_train.sweep.spec import load_spec, spec_from_mapping

    values = apply_overrides(
        load_spec(args.config),
        axes={name: getattr(args, name) for name in AXIS_FLAGS},
        settings=args.settings,
        top={
            **{key: getattr(args, dest(flag)) for flag, key, *_ in SPEC_FLAGS},
            "asha": args.asha,
        },
    )
    return spec_from_mapping(values, source=args.config or "command line")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from tinykg_train.sweep import run_sweep

    spec = spec_from_args(args)
    outcome = run_sweep(
        spec,
        args.data,
        args.out,
        tracking_uri=args.tracking_uri,
        address=args.address,
        resume=args.resume,
        num_cpus=args.num_cpus,
        num_gpus=args.num_gpus,
    )
    print(outcome.table)
    print(outcome.verdict())
    for path in outcome.artifacts:
        print(f"wrote {path}")
    print(f"MLflow parent run {outcome.parent_run_id} ({outcome.tracking_uri})")
    if outcome.exit_code:
        print(f"error: {outcome.verdict()}", file=sys.stderr)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(run_cli(main))
