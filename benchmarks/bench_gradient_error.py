"""Gradient error and bytes held of one training step per compression setting.

One CF step of a model (default KGAT) on one batch of a dataset (default music-kgcn), run by the
trainer's own code (`open_session`, `model.loss` under `compress_saved_tensors`): for each setting,
the error of all parameter gradients relative to the exact (FP32) step, ||g - g_exact|| / ||g_exact||,
averaged over draws of the rounding noise, and the bytes autograd holds for backward. It shows which
saved tensors' rounding dominates a step's gradient error, and what keeping them wider costs.
Message (and KGIN's edge) dropout is off: the codec draws its seeds from torch's generator, so with
dropout on, the masks of the exact and the compressed steps would differ.

    python -m benchmarks.bench_gradient_error [--dataset music-kgcn] [--model kgat] [--draws 4]
        [--threads 1] [--no-write]

Every figure comes from one run on one batch; ratios compare numbers measured side by side.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from benchmarks._datasets import DatasetUnavailable, resolve_dataset
from benchmarks._report import REPO_ROOT, markdown_table, publish_section, section_name
from tinykg_train.config import MODELS


@dataclass(frozen=True)
class Setting:
    label: str
    bits: int
    score_bits: int
    normalize_bits: int


SETTINGS = (
    Setting("INT8", 8, 8, 8),
    Setting("INT4", 4, 8, 4),
    Setting("INT2, every tensor at 2 bits", 2, 2, 2),
    Setting("INT2, scored embeddings at 8 bits", 2, 8, 2),
    Setting("INT2, normalized outputs at 4 bits", 2, 2, 4),
    Setting("INT2 (defaults: both)", 2, 8, 4),
    Setting("INT1 (defaults: both)", 1, 8, 4),
)


def measure(
    dataset_dir, model_name: str, draws: int
) -> tuple[int, list[tuple[Setting, float, int]]]:
    """(FP32 bytes held, [(setting, mean relative gradient error, bytes held)])."""
    from tinykg_train.compress import ActivationMeter, CompressionConfig, compress_saved_tensors
    from tinykg_train.config import TrainConfig
    from tinykg_train.session import open_session

    with tempfile.TemporaryDirectory() as tmp:
        config = TrainConfig.from_yaml(REPO_ROOT / "configs" / f"{model_name}.yaml").with_overrides(
            data=str(dataset_dir), bits=32, dropout=0.0, device="cpu", out=f"{tmp}/run"
        )
        # KGIN's edge dropout draws from the same generator: off too
        config = config.with_overrides(extra={**config.extra, "edge_dropout": 0.0})
        session = open_session(config, torch.device("cpu"))
    model = session.model
    model.train()
    batch = next(iter(session.cf_batches.epoch(0)))
    params = [p for p in model.parameters() if p.requires_grad]

    def step(compression: CompressionConfig, seed: int) -> tuple[torch.Tensor, int]:
        model.set_compression(compression)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(seed)
        with compress_saved_tensors(compression):
            with ActivationMeter(model) as meter:
                loss = model.loss(*batch)
            loss.backward()
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        return torch.cat([g.flatten() for g in grads]), int(meter.total_bytes)

    exact, fp32_bytes = step(CompressionConfig(), 0)  # no dropout: the same at every seed
    results = []
    for setting in SETTINGS:
        compression = CompressionConfig(
            bits=setting.bits,
            scheme="auto",
            score_bits=setting.score_bits,
            normalize_bits=setting.normalize_bits,
        )
        errors, held = [], 0
        for seed in range(draws):
            grad, held = step(compression, seed)
            errors.append(float((grad - exact).norm() / exact.norm()))
        results.append((setting, sum(errors) / len(errors), held))
    return fp32_bytes, results


def report(dataset: str, model: str, draws: int, fp32_bytes: int, results) -> str:
    rows = [
        [s.label, s.bits, s.score_bits, s.normalize_bits, f"{error:.3f}", f"{held / 2**20:.2f}",
         f"{fp32_bytes / held:.1f}x"]
        for s, error, held in results
    ]  # fmt: skip
    table = markdown_table(
        ["setting", "bits", "score bits", "normalize bits", "gradient error", "held MiB",
         "FP32 / held"],
        rows,
    )  # fmt: skip
    return (
        f"One CF step of {model} on one batch of {dataset} (the model's `configs/{model}.yaml`, "
        f"message dropout off), CPU. *gradient error*: ||g - g_exact|| / ||g_exact|| over all "
        f"parameter gradients, mean of {draws} draws of the rounding noise. *held MiB*: bytes "
        f"autograd holds for backward in the step (FP32: {fp32_bytes / 2**20:.2f} MiB). "
        "*score bits*: the least width of the final embeddings the BPR scores read; *normalize "
        "bits*: of the outputs L2 normalizations save (both are `CompressionConfig` settings).\n\n"
        f"{table}\n"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_gradient_error",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", default="music-kgcn", help="a ../shared/data name or a dir")
    parser.add_argument("--model", default="kgat", choices=MODELS)
    parser.add_argument("--draws", type=int, default=4, help="noise draws per setting")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.draws < 1:
        print(f"--draws needs to be a positive integer (got {args.draws})", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    try:
        name, path = resolve_dataset(args.dataset)
    except DatasetUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    fp32_bytes, results = measure(path, args.model, args.draws)
    body = report(name, args.model, args.draws, fp32_bytes, results)
    print(body)
    title = f"Gradient error per compression setting ({args.model}, {name}; CPU)"
    section = section_name("gradient-error", "cpu", name)
    publish_section(section, title, body, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
