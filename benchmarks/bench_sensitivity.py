"""Where INT2 loses accuracy: each saved tensor's gradient error per width, phase, model and dataset.

    python -m benchmarks.bench_sensitivity [--datasets music-kgcn,...] [--models kgat,kgin,...]
        [--bits 1,2,4,8] [--draws 2] [--matrix runs/matrix] [--threads 1] [--no-write]

For every (dataset, model, phase) it takes a trained model, the last checkpoint of the accuracy
matrix's FP32 seed-0 run (`benchmarks.bench_matrix`, read from `--matrix`; the untrained model when
there is none, and the section says which), and one batch of the phase, and measures with
`tinykg_train.compress.adaptive.sensitivity` each quantized saved tensor (a *site*) on its own:
`||g_site - g||^2 / ||g||^2`, the relative squared error its rounding adds to the step's gradient,
at each width, averaged over `--draws` draws of the rounding noise; and at 2 bits the bias (the
same for the draws' mean gradient: about error / draws when the rounding is unbiased) and the
parameter whose own gradient the site perturbs most, relatively. Alongside:
each dataset's shape (interactions per user, KG triples per interaction), where the errors it
explains come from. Section `sensitivity-<device>` of BENCHMARKS.md (`sensitivity-<dataset>-<device>`
when one dataset is measured).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm

from benchmarks._cli import comma_list
from benchmarks._report import REPO_ROOT, markdown_table, publish_section, section_name
from benchmarks.bench_matrix import PLAN, Group, dataset_dir, read_plan, run_config

PHASES = ("cf", "kg")


def dataset_shape(data: Path) -> list[object]:
    """Name-free numbers of a dataset: sizes and the ratios the errors may depend on."""
    from kg_data import KGDataset

    dataset = KGDataset.open(data)
    train = dataset.metadata["n_interactions"]["train"]
    return [
        dataset.n_users, dataset.n_items, dataset.n_entities, train,
        f"{train / dataset.n_users:.1f}", dataset.n_triples, f"{dataset.n_triples / train:.2f}",
        f"{train / (dataset.n_users * dataset.n_items):.4f}",
    ]  # fmt: skip


def trained_session(group: Group, data: Path, plan: dict, matrix: Path, tmp: Path):
    """The group's FP32 seed-0 run settings at INT2 (the default widths the sites ask for), with
    that run's trained weights when the matrix has them; and whether it had them."""
    from tinykg_train.checkpoint import load_checkpoint
    from tinykg_train.session import open_session

    config = run_config(group, "32", data, plan, {}, matrix)
    checkpoint_path = Path(config.out) / "checkpoint.pt"
    config = config.with_overrides(bits=2, out=str(tmp / "run"), resume=False)
    session = open_session(
        config, torch.device(config.device if config.device != "auto" else "cpu")
    )
    trained = checkpoint_path.is_file()
    if trained:
        session.model.load_state_dict(load_checkpoint(checkpoint_path)["model"])
    session.model.train()
    session.model.on_epoch_start(0)
    return session, trained


def measure_group(session, bits: Sequence[int], draws: int) -> list[tuple[str, object, dict]]:
    """Per phase: (phase, sites, {bits: Sensitivity})."""
    from tinykg_train.compress.adaptive.sensitivity import measure
    from tinykg_train.precision import first_batch, phases

    results = []
    for phase, batches, loss_fn in phases(session):
        batch = first_batch(batches, 0, session.device)
        by_bits = {
            b: measure(
                session.model, loss_fn, batch, session.compression, probe_bits=b, draws=draws
            )
            for b in bits
        }
        results.append((phase, next(iter(by_bits.values())).sites, by_bits))
    return results


def site_rows(dataset: str, model: str, phase: str, sites, by_bits, bits) -> list[list[object]]:
    rows = []
    two = by_bits.get(2)
    at_requested = [
        by_bits[s.requested_bits].errors[s.index] if s.requested_bits in by_bits else None
        for s in sites
    ]
    total = sum(e for e in at_requested if e is not None) or 1.0
    for site in sites:
        errors = [f"{by_bits[b].errors[site.index]:.2e}" for b in bits]
        bias = (
            f"{two.bias[site.index] / max(two.errors[site.index], 1e-30):.2f}"
            if two is not None and two.bias is not None
            else ""
        )
        share = at_requested[site.index]
        rows.append([
            dataset, model, phase, site.index, site.module or "(model)",
            "x".join(map(str, site.shape)), site.requested_bits, *errors, bias,
            f"{share / total:.0%}" if share is not None else "", hardest_hit(two, site.index),
        ])  # fmt: skip
    return rows


def hardest_hit(sensitivity, site: int) -> str:
    """The parameter whose own gradient the site's rounding perturbs most, relatively, and that
    relative squared error: `relation_embedding 3.8e-01`."""
    if sensitivity is None or not sensitivity.by_parameter:
        return ""
    by_parameter = sensitivity.by_parameter[site]
    name = max(by_parameter, key=by_parameter.get)
    return f"{name} {by_parameter[name]:.1e}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_sensitivity",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--plan", type=Path, default=PLAN, help="the matrix plan (datasets, settings)"
    )
    parser.add_argument("--datasets", type=comma_list(str), help="a subset of the plan's datasets")
    parser.add_argument(
        "--models", type=comma_list(str), default=["kgat", "kgin", "kgcn", "lightgcn"]
    )
    parser.add_argument("--bits", type=comma_list(int, (1, 2, 4, 8)), default=[1, 2, 4, 8])
    parser.add_argument("--draws", type=int, default=2, help="draws of the rounding noise per site")
    parser.add_argument("--matrix", type=Path, default=REPO_ROOT / "runs" / "matrix")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    plan = read_plan(args.plan)
    datasets = args.datasets or list(plan["datasets"])
    shapes, rows, sources = [], [], []
    for name in tqdm(datasets, desc="datasets", disable=None):
        data = dataset_dir(name, plan["datasets"][name] or {})
        shapes.append([name, *dataset_shape(data)])
        for model in args.models:
            with tempfile.TemporaryDirectory() as tmp:
                group = Group(name, "whole", model, 0)
                session, trained = trained_session(group, data, plan, args.matrix, Path(tmp))
                sources.append(
                    f"{name}/{model}: {'trained (matrix FP32 seed 0)' if trained else 'untrained'}"
                )
                for phase, sites, by_bits in measure_group(session, args.bits, args.draws):
                    rows += site_rows(name, model, phase, sites, by_bits, args.bits)
    widths = [f"error at {b} bits" for b in args.bits]
    body = "\n\n".join(
        [
            "Per site (a quantized saved tensor of one training step, in save order): the relative "
            "squared error `||g_site - g||^2 / ||g||^2` its rounding alone adds to the step's "
            f"gradient, mean of {args.draws} draws; *bias / error at 2 bits*: the same for the draws' "
            f"mean gradient over the error (about 1/{args.draws} for unbiased rounding); *share*: of "
            "the summed errors at the widths the default INT2 config gives each site (*asks*: 2 bits, "
            "8 for the scored embeddings, 4 for L2-normalized outputs); *hardest-hit gradient at "
            "2 bits*: the parameter whose own gradient the site's rounding perturbs most, with its "
            "relative squared error `||g_site,p - g_p||^2 / ||g_p||^2` (a parameter with a small "
            "share of the gradient's norm can take a large error that the sum over every parameter "
            "hides).",
            "Datasets:",
            markdown_table(
                [
                    "dataset",
                    "users",
                    "items",
                    "entities",
                    "train interactions",
                    "per user",
                    "triples",
                    "triples per interaction",
                    "density",
                ],
                shapes,
            ),  # fmt: skip
            "Models measured: " + "; ".join(sources) + ".",
            markdown_table(
                [
                    "dataset",
                    "model",
                    "phase",
                    "site",
                    "module",
                    "shape",
                    "asks",
                    *widths,
                    "bias / error at 2 bits",
                    "share",
                    "hardest-hit gradient at 2 bits",
                ],
                rows,
            ),  # fmt: skip
        ]
    )
    print(body)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # one dataset: its own section, so measuring another dataset leaves the others' results alone
    only = datasets[0] if len(datasets) == 1 else None
    publish_section(
        section_name("sensitivity", device, only),
        f"Gradient error per saved tensor, width, phase and model ({', '.join(datasets)}; {device.upper()})",
        body,
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
