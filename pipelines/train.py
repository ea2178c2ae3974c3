"""python -m pipelines.train --data DIR --model kgat --bits 2 --epochs N --seed S --out RUN_DIR

Trains one KG recommender with activations compressed to `--bits` for backward (32 = none), writes
RUN_DIR/metrics.json and a checkpoint per epoch, and logs the run to MLflow. Settings come from the
defaults, then the model's own defaults (`--model`; tinykg_train.model_defaults), then
`--config FILE.yaml`, then the command line; with `--resume` the run dir's own config.yaml comes
before `--config`. Bad input prints one line and exits with status 2.

`--workers N` (N >= 2) trains data-parallel on N Ray Train workers (tinykg_train.distributed): on
the cluster at `--address` / `RAY_ADDRESS` (set inside `ray job submit`), else on a private local
Ray started for the run and stopped after it. A run that fails after Ray Train's restarts exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from pipelines._cli import prog_name, run_cli
from tinykg_train.compression_defaults import BITS, width_label

WIDTHS = ", ".join(map(str, BITS))

# On/off settings (flag, TrainConfig field, group, help), given without a value.
SWITCHES = [
    ("--sparse-adam", "sparse_adam", "sampling", "--sampler neighbor or --partitions N: update the big embedding tables row by row with SparseAdam (only the rows a step reads move) instead of dense Adam"),
    ("--offload-embeddings", "offload_embeddings", "sampling", "--sampler neighbor or --partitions N: keep the big embedding tables and their Adam state in host memory, a cache of hot rows on the device (implies --sparse-adam); table size bounded by host RAM"),
]  # fmt: skip

# (flag, TrainConfig field, metavar, help). Values are parsed by TrainConfig, so a wrong one is a
# one-line error naming the setting. The "(default: ...)" of each help is added from the code's
# defaults (TrainConfig, compression_defaults, model_defaults), never written here.
SETTINGS: dict[str, list[tuple[str, str, str, str]]] = {
    "run": [
        ("--data", "data", "DIR", "dataset dir written by `python -m pipelines.ingest`"),
        ("--out", "out", "RUN_DIR", "run dir for metrics.json, checkpoint.pt, config.yaml"),
        ("--model", "model", "NAME", "kgat, kgin, kgcn, lightgcn or bprmf; brings that model's own defaults"),
        ("--epochs", "epochs", "N", "epochs to train, at most"),
        ("--seed", "seed", "S", "seed of weights, batches, negatives and noise"),
        ("--device", "device", "auto|cpu|cuda", "auto = the GPU when torch sees one"),
        ("--threads", "threads", "N", "torch CPU threads"),
        ("--workers", "workers", "N", "data-parallel Ray Train workers; 1 trains in this process"),
    ],
    "compression": [
        ("--bits", "bits", "B", f"bits per saved activation: {WIDTHS} (32 = uncompressed), or auto = chosen per saved tensor from its measured gradient sensitivity"),
        ("--auto-bits", "auto_bits", "B", "--bits auto: the average width it aims at"),
        ("--adapt-every", "adapt_every", "N", "--bits auto: measure the sensitivities again every N epochs (0 = once)"),
        ("--memory-budget", "memory_budget", "SIZE", "--bits auto: the widths whose training step fits SIZE (e.g. 300MB, 1.5GiB: model state, activations held, temporaries); says what it chose and what FP32 would need"),
        ("--group-size", "group_size", "G", "elements per quantization group"),
        ("--scheme", "scheme", "NAME", "quantization levels: auto (normal at 2 bits, else uniform), uniform or normal"),
        ("--score-bits", "score_bits", "B", f"least bits of the final embeddings the BPR scores read: {WIDTHS} (32 = exact)"),
        ("--normalize-bits", "normalize_bits", "B", f"least bits of the outputs L2 normalizations save: {WIDTHS} (32 = exact)"),
        ("--exact-phases", "exact_phases", "P,P", "training phases whose quantized saves stay exact at fixed --bits: kg (KGAT's KG steps), cf, or cf,kg (the compressed code path storing nothing quantized: an A/A control against --bits 32)"),
    ],
    "optimization": [
        ("--lr", "lr", "LR", "Adam learning rate"),
        ("--adam-state", "adam_state", "FORM", "the embedding tables' Adam moments: float32 (Adam's), bfloat16 (both, stochastic rounding: 0.5 of Adam's state) or rowwise (first bfloat16, second one per row, FBGEMM's partial row-wise Adam: 0.26)"),
        ("--l2", "l2", "W", "L2 weight on the embeddings a batch touches"),
        ("--batch-size", "batch_size", "N", "training pairs per CF step"),
        ("--kg-batch-size", "kg_batch_size", "N", "triples per KG step, KGAT"),
        ("--max-batches-per-epoch", "max_batches_per_epoch", "N", "cap the steps per phase, for quick runs"),
        ("--patience", "patience", "N", "stop after N evaluations without a better valid Recall@20"),
        ("--min-epochs", "min_epochs", "N", "never stop early before N epochs (an early plateau is not convergence)"),
    ],
    "model": [
        ("--embed-dim", "embed_dim", "D", "embedding size"),
        ("--layers", "n_layers", "L", "propagation layers / hops"),
        ("--dropout", "dropout", "P", "message dropout"),
        ("--kg-neighbors", "kg_neighbors", "K", "KGCN: sampled neighbors per entity"),
        ("--intents", "n_intents", "N", "KGIN: user intents"),
    ],
    "sampling": [
        ("--sampler", "sampler", "none|neighbor", "neighbor: each CF step propagates over its batch's sampled subgraph only (kgat, kgin, kgcn, lightgcn)"),
        ("--fanouts", "fanouts", "F,F", "neighbors sampled per node at each layer, one per --layers, -1 = all"),
        ("--partitions", "partitions", "N", "N > 1: train on N self-sufficient partitions of the graph, one at a time, each step on its partition's interactions and subgraph (kgat, kgin, lightgcn; kgcn with --sampler neighbor); 1 = whole graph"),
        ("--cache-rows", "cache_rows", "N", "--offload-embeddings: rows of each table the device cache holds"),
        ("--prefetch-steps", "prefetch_steps", "N", "--offload-embeddings: steps ahead whose rows are copied to the cache while earlier steps train"),
    ],
    "evaluation": [
        ("--eval-ks", "eval_ks", "K,K", "cut-offs for Recall@K / NDCG@K, e.g. 20,50 (20 is always added)"),
        ("--eval-every", "eval_every", "N", "rank the valid split every N epochs"),
        ("--eval-batch-users", "eval_batch_users", "N", "users scored at once when ranking"),
        ("--eval-users", "eval_users", "N", "rank a seeded sample of at most N users of each split (all items still ranked; for graphs whose full ranking outlasts training)"),
    ],
}  # fmt: skip


def show_value(field: str, value: Any) -> str:
    """A setting's value as --help shows it."""
    if value is None:
        return {
            "group_size": "one group per row",
            "max_batches_per_epoch": "all",
            "threads": "the CPUs this process may use",
            "fanouts": "10 per layer",
            "cache_rows": "sized to the steps and the look-ahead",
            "eval_users": "every user",
        }.get(field, "none")
    if isinstance(value, list):
        return ",".join(map(str, value)) or "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def show_default(field: str, defaults: dict[str, Any]) -> str:
    """The default --help shows: TrainConfig's, or each model's where the models' own differ."""
    from tinykg_train.model_defaults import MODEL_DEFAULTS, MODEL_FIELDS

    per_model = {m: values[field] for m, values in MODEL_DEFAULTS.items() if field in values}
    if field in MODEL_FIELDS and len(set(per_model.values())) > 1:
        return "per model: " + ", ".join(f"{m} {show_value(field, v)}" for m, v in per_model.items())
    return show_value(field, defaults[field])


def describe_knobs(model: str) -> str:
    """ "kgin: independence=distance, ..." for the epilog ("" for a model without knobs)."""
    from tinykg_train.model_defaults import KNOBS

    knobs = ", ".join(
        f"{key}={'null' if knob.default is None else knob.default}"
        for key, knob in KNOBS[model].items()
    )
    return f"{model}: {knobs}" if knobs else ""


def build_parser() -> argparse.ArgumentParser:
    from tinykg_train.config import MODELS, TrainConfig

    parser = argparse.ArgumentParser(
        prog=prog_name("train"),
        description=(
            "Train a knowledge-graph recommender with compressed activations. Writes RUN_DIR/"
            "metrics.json (test Recall/NDCG of the best valid epoch, activation bytes, epoch "
            "seconds), a checkpoint after every epoch, and an MLflow run."
        ),
        epilog=(
            "Settings: defaults < the model's own defaults (--model X brings X's settings, shown "
            "'per model' above) < --config FILE.yaml < command line (with --resume, the run dir's "
            "config.yaml before --config). Model-specific settings for --set, with their defaults: "
            + "; ".join(describe_knobs(m) for m in MODELS if describe_knobs(m))
            + ". Example: python -m pipelines.train --data data/lfm1m --model kgat "
            "--bits 2 --epochs 10 --seed 0 --out runs/kgat-int2"
        ),
    )
    parser.add_argument(
        "--config",
        metavar="FILE.yaml",
        help="YAML mapping of settings (field names as in config.yaml)",
    )
    defaults = TrainConfig().to_dict()
    groups = {}
    for group_name, rows in SETTINGS.items():
        group = groups[group_name] = parser.add_argument_group(group_name)
        for flag, field, metavar, text in rows:
            text = text if field == "data" else f"{text} (default: {show_default(field, defaults)})"
            group.add_argument(
                flag, dest=field, metavar=metavar, help=text, default=argparse.SUPPRESS
            )
    for flag, field, group_name, text in SWITCHES:
        groups[group_name].add_argument(
            flag, dest=field, action="store_const", const=True, default=argparse.SUPPRESS, help=text
        )
    group = parser.add_argument_group("run control")
    group.add_argument(
        "--resume",
        action="store_true",
        default=argparse.SUPPRESS,
        help="continue the run in --out from its last checkpoint (same settings; --epochs may grow)",
    )
    group.add_argument(
        "--set",
        dest="extra",
        action="append",
        metavar="KEY=VALUE",
        default=[],
        help="a model-specific setting for `extra` (repeatable; VALUE read as YAML; see below)",
    )
    group.add_argument(
        "--model-builder",
        metavar="MODULE:FUNCTION",
        help="build models with your own build_model(name, dataset, config) (default tinykg_train.models)",
    )
    group.add_argument(
        "--address",
        metavar="ADDR",
        help="Ray cluster for --workers N (default: $RAY_ADDRESS, else a private local Ray for this run)",
    )
    group = parser.add_argument_group("tracking")
    group.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    group.add_argument(
        "--tracking-uri",
        metavar="URI",
        help="MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the cwd)",
    )
    group.add_argument(
        "--experiment", default="tinykg", metavar="NAME", help="MLflow experiment (default tinykg)"
    )
    group.add_argument(
        "--run-name", metavar="NAME", help="MLflow run name (default MODEL-WIDTH-seedS, WIDTH fp32 or intB)"
    )
    return parser


def parse_extra(pairs: Sequence[str]) -> dict[str, Any]:
    """`--set key=value` pairs; values read as YAML scalars (`0.5` is a float, `true` a bool)."""
    import yaml

    from tinykg_train.errors import ConfigError

    extra: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set needs KEY=VALUE (got {pair!r})")
        try:
            extra[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key}: {value!r} is not a valid value") from None
    return extra


def load_config(args: argparse.Namespace):
    """The run's TrainConfig: defaults < the model's defaults < saved config.yaml (--resume) <
    --config < flags (`extra` merged key by key)."""
    from tinykg_train.config import TrainConfig, read_yaml_mapping
    from tinykg_train.run_dir import RunDir

    flags = {
        field: value
        for field, value in vars(args).items()
        if field in TrainConfig.field_names() and field != "extra"
    }
    layers: list[dict[str, Any]] = []
    if flags.get("resume"):
        saved = RunDir(flags.get("out") or TrainConfig.out).config
        if saved.is_file():
            layers.append(read_yaml_mapping(saved))
    source = "command line"
    if args.config:
        layers.append(read_yaml_mapping(args.config))
        source = args.config
    extra = parse_extra(args.extra)
    layers.append({**flags, **({"extra": extra} if extra else {})})
    return TrainConfig.layered(*layers, source=source)


def make_tracker(args: argparse.Namespace):
    if args.no_mlflow:
        return None
    from tinykg_train.tracking import MlflowTracker

    return MlflowTracker(
        tracking_uri=args.tracking_uri, experiment=args.experiment, run_name=args.run_name
    )


def result_table(result: dict[str, Any]) -> str:
    """The end-of-run summary: what was trained and how it scored on the test split."""
    from tinykg_train.memory_breakdown import summary_rows

    seconds = result["epoch_seconds"]
    activation = result["activation_bytes"]
    rows: list[tuple[str, str]] = [
        ("model", f"{result['model']} {width_label(result['bits'])} seed {result['seed']}"),
        ("device", result["device"]),
        ("torch threads", str(result.get("torch_threads", "n/a"))),
        ("epochs", f"{result['epochs_trained']} (best {result['best_epoch']})"),
        *(
            (f"test {name}", f"{value:.4f}")
            for name, value in result.items()
            if name.startswith(("recall@", "ndcg@"))
        ),
        *popular_rows(result),
        ("activation MiB", f"{activation / 2**20:.2f}" if activation is not None else "n/a"),
        ("epoch seconds", f"{sum(seconds) / len(seconds):.2f} mean" if seconds else "n/a"),
        ("peak RSS MiB", f"{result['peak_rss_bytes'] / 2**20:.0f}"),
    ]
    if result.get("cuda_max_memory_allocated") is not None:
        rows.append(("CUDA peak MiB", f"{result['cuda_max_memory_allocated'] / 2**20:.0f}"))
    rows += summary_rows(result.get("memory_breakdown") or {})
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def popular_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The most-popular ranking's test metrics, each with the model's as a multiple of it: a
    model below 1x learned nothing per user that popularity does not already give."""
    rows = []
    for name, popular in (result.get("most_popular") or {}).items():
        versus = f" (model {result[name] / popular:.2f}x)" if popular > 0 else ""
        rows.append((f"most popular {name}", f"{popular:.4f}{versus}"))
    return rows


def run_training(config, tracker, args: argparse.Namespace) -> dict[str, Any]:
    """In this process (one worker) or on Ray Train workers (--workers N)."""
    from tinykg_train.errors import ConfigError

    if config.workers > 1:
        from tinykg_train.distributed import train_distributed

        return train_distributed(
            config, address=args.address, tracker=tracker, model_builder=args.model_builder
        )
    if args.address:
        raise ConfigError(
            "--address runs data-parallel workers on a cluster: add --workers N (N >= 2)"
        )
    from tinykg_train.trainer import train

    builder = None
    if args.model_builder:
        from tinykg_train.sweep.spec import resolve_model_builder

        builder = resolve_model_builder(args.model_builder)
    return train(config, tracker=tracker, model_builder=builder)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from tinykg_train.run_dir import RunDir

    config = load_config(args)
    tracker = make_tracker(args)
    try:
        result = run_training(config, tracker, args)
    except RuntimeError as exc:
        from tinykg_train.distributed import TrainingFailed

        if not isinstance(exc, TrainingFailed):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if result["resumed_at_epoch"] is not None:
        print(f"resumed at epoch {result['resumed_at_epoch']}")
    print(result_table(result))
    print(f"metrics: {RunDir(config.out).metrics}")
    if tracker is not None:
        print(
            f"mlflow:  run {tracker.run_id} in experiment {tracker.experiment!r} at {tracker.tracking_uri}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
