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

from pipelines._cli import run_cli

AXIS_FLAGS = ("model", "bits", "lr", "seed", "embed_dim", "n_layers")


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (exit status 2), like every other input error."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m pipelines.sweep",
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
    for name in AXIS_FLAGS:
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            metavar="V[,V...]",
            help=f"{name}: one value or a comma list (grid)",
        )
    parser.add_argument("--epochs", metavar="N", help="epochs per trial (ASHA's maximum too)")
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fix any training setting, e.g. --set batch_size=1024 (repeatable)",
    )
    parser.add_argument(
        "--name",
        help="sweep name: folder under --out and MLflow parent run name (default from the config, else 'sweep')",
    )
    parser.add_argument(
        "--experiment",
        metavar="NAME",
        help="MLflow experiment (default from the config, else tinykg-sweep)",
    )
    parser.add_argument(
        "--num-samples",
        type=int,
        metavar="N",
        help="samples of the search space (the grid is repeated N times)",
    )
    parser.add_argument(
        "--max-concurrent",
        type=int,
        metavar="N",
        help="trials running at the same time (default: as many as the resources allow)",
    )
    parser.add_argument(
        "--cpus-per-trial", type=float, metavar="N", help="CPUs reserved per trial (default 1)"
    )
    parser.add_argument(
        "--gpus-per-trial",
        type=float,
        metavar="N",
        help="GPUs reserved per trial, fractions allowed (default 0)",
    )
    parser.add_argument(
        "--asha",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ASHA early stopping on valid recall@20 (settings from the config's asha:, else grace 1, factor 2)",
    )
    parser.add_argument(
        "--model-builder",
        metavar="MODULE:FUNCTION",
        help="build models with your own build_model(name, dataset, config) (default tinykg_train.models)",
    )
    parser.add_argument(
        "--out",
        default="runs/sweeps",
        metavar="DIR",
        help="where sweeps are stored: DIR/<name> (default runs/sweeps)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted sweep DIR/<name> (same options as the first time)",
    )
    parser.add_argument(
        "--tracking-uri",
        metavar="URI",
        help="MLflow tracking URI (default $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db)",
    )
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="Ray cluster to join (default: the job's cluster under ray job submit, else a private local Ray)",
    )
    parser.add_argument(
        "--num-cpus", type=int, metavar="N", help="CPUs of the private local Ray (default: all)"
    )
    parser.add_argument(
        "--num-gpus",
        type=int,
        metavar="N",
        help="GPUs of the private local Ray (default: all it sees)",
    )
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
            "epochs": args.epochs,
            "name": args.name,
            "experiment": args.experiment,
            "num_samples": args.num_samples,
            "max_concurrent": args.max_concurrent,
            "resources.cpu": args.cpus_per_trial,
            "resources.gpu": args.gpus_per_trial,
            "asha": args.asha,
            "model_builder": args.model_builder,
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
