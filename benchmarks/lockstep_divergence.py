"""How fast two trainings of one seed drift apart: FP32, the A/A control and a width in lockstep.

    python -m benchmarks.lockstep_divergence [--plan benchmarks/matrix.yaml]
        [--dataset synthetic-medium] [--model kgat]
        [--bits 2] [--steps 60] [--every 10] [--seed 0] [--threads 1]

Three sessions of the accuracy matrix's settings for the dataset (`benchmarks/matrix.yaml`), from
the same initial weights: FP32, the A/A control (`--bits 2 --exact-phases cf,kg`: the compressed
code path storing nothing quantized, whose steps compute FP32's gradients) and `--bits`. Each takes
the same CF steps (the trainer's `run_phase` on the epoch's batches in order) with the global random
state reset to the same value before each step, so all three draw the same dropout masks and
negatives. Every `--every` steps it prints, for the control and the width, how far its parameters
are from FP32's against how far FP32's have moved from the start: `||theta - theta_fp32|| /
||theta_fp32 - theta_0||` over all parameters (1 = as far apart as training has moved them).

What it shows: how much of a paired comparison's pairing survives training. If rounding-sized
differences (the control) grow to the size of the width's own within an epoch, two runs of one seed
share their start, batches and negatives but not their trajectories, and pairing by seed removes
little of the seed-to-seed noise (docs/precision.md). A diagnostic, not a section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.bench_matrix import CONTROL, PLAN, Group, dataset_dir, read_plan, run_config
from benchmarks.bench_memory import OneBatch
from tinykg_train.compression_defaults import BITS


def open_sessions(
    plan_path: Path, dataset: str, model: str, bits: int, seed: int, tmp: Path
) -> dict[str, object]:
    """FP32, the control and `bits` sessions of one matrix group, all from FP32's initial weights."""
    from tinykg_train.session import open_session

    plan = read_plan(plan_path)
    if dataset not in plan["datasets"]:
        raise SystemExit(f"error: {dataset!r} is not a dataset of {plan_path}")
    data = dataset_dir(dataset, plan["datasets"][dataset])
    group = Group(dataset, "whole", model, seed)
    sessions = {}
    for width in ("32", CONTROL, str(bits)):
        config = run_config(group, width, data, plan, {}, tmp).with_overrides(device="cpu")
        sessions[width] = open_session(config, torch.device("cpu"))
    start = sessions["32"].model.state_dict()
    for session in sessions.values():
        session.model.load_state_dict(start)
        session.model.train()
        session.model.on_epoch_start(0)  # KGAT's attention, from the same weights
    return sessions


def update_difference(model, reference, start: Sequence[torch.Tensor]) -> float:
    """How far `model` has moved from `reference` against how far `reference` has moved from the
    common start, over all parameters: `||theta - theta_ref|| / ||theta_ref - theta_0||`."""
    apart = moved = 0.0
    for p, q, p0 in zip(model.parameters(), reference.parameters(), start, strict=True):
        apart += (p - q).pow(2).sum().item()
        moved += (q - p0).pow(2).sum().item()
    return (apart / max(moved, 1e-300)) ** 0.5


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.lockstep_divergence",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--plan", type=Path, default=PLAN, help="the matrix plan (its settings)")
    parser.add_argument("--dataset", default="synthetic-medium", help="a dataset of the plan")
    parser.add_argument("--model", default="kgat")
    parser.add_argument("--bits", type=int, default=2, choices=[b for b in BITS if b < 32])
    parser.add_argument("--steps", type=int, default=60, help="CF steps (default 60)")
    parser.add_argument("--every", type=int, default=10, help="print every N steps (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    if args.steps <= 0 or args.every <= 0:
        parser.error("--steps and --every need positive counts")
    torch.set_num_threads(args.threads)
    from tinykg_train.epoch import run_phase

    with tempfile.TemporaryDirectory(prefix="lockstep_") as tmp:
        sessions = open_sessions(
            args.plan, args.dataset, args.model, args.bits, args.seed, Path(tmp)
        )
        fp32 = sessions["32"].model
        start = [p.detach().clone() for p in fp32.parameters()]
        print(
            f"{args.dataset} {args.model}: parameters' distance from FP32's, over FP32's distance "
            "from the start"
        )
        print(f"{'step':>6} {'A/A control':>12} {'INT' + str(args.bits):>12}")
        epoch = 0
        batches = sessions["32"].cf_batches.epoch(epoch)
        for step in range(1, args.steps + 1):
            batch = next(batches, None)
            if batch is None:  # the next epoch's batches
                epoch += 1
                batches = sessions["32"].cf_batches.epoch(epoch)
                batch = next(batches)
            for session in sessions.values():
                torch.manual_seed(args.seed * 1_000_003 + step)  # the same draws for all three
                run_phase(session, 0, "cf", OneBatch(batch), session.model.loss, measure=False)
            if step == 1 or step % args.every == 0:
                control = update_difference(sessions[CONTROL].model, fp32, start)
                width = update_difference(sessions[str(args.bits)].model, fp32, start)
                print(f"{step:>6} {control:>12.2e} {width:>12.2e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
