"""Where a CF step's peak memory is reached: the most bytes live during each autograd node (and
forward op) of one training step, above what was live when the step began.

    python -m benchmarks.peak_by_node [--dataset synthetic:50000] [--model kgat] [--bits 2]
        [--gpu-blocks] [--rows 15]

The trainer's own session and step (`bench_memory.open_step_session`, `epoch.run_phase`) on the
epoch's first CF batch, after two warm-up steps, under `torch.autograd.profiler` with its
allocation record. Every allocation and free is attributed to the innermost autograd node it
happened in (`PropagatedBiInteractionBackward`, `L2NormalizeBackward`, ...; in forward the innermost
op), and each node's line is the largest total of live bytes reached while it ran. The step's peak
is the largest line; the nodes near it are what a cut must lower together (cutting one node's
temporaries moves the peak only down to the next node's).

The baseline (bytes live at the step's start: tables, Adam state, graph) is left out, and it
shifts by a few dozen MiB from run to run with what earlier steps leave: compare lines within one
run, not across runs (`bench_memory --peak`'s tracked peak is the stable figure). `--gpu-blocks`
cuts whole-graph work into the blocks a GPU takes (at most `CUDA_MAX_BLOCKS` per op, where the CPU
takes `BLOCK_BYTES` per block), so a CPU run shows a GPU step's ranking. A diagnostic, not a
section of BENCHMARKS.md. CPU only: on CUDA use `torch.cuda.memory._record_memory_history`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks._datasets import DatasetUnavailable, resolve_dataset
from benchmarks.bench_memory import OneBatch, open_step_session
from tinykg_train.compress.blocks import budgets_as_on
from tinykg_train.compression_defaults import BITS
from tinykg_train.config import MODELS

WARMUP_STEPS = 2
NODE_PREFIX = "autograd::engine::evaluate_function: "


def allocation_events(profiler) -> list[tuple[int, int, tuple[str, ...]]]:
    """`(time ns, bytes (+ allocated, - freed), enclosing event names outermost first)` of every
    allocation the profiler recorded, in time order."""
    from torch._C._profiler import _EventType

    events = []
    pending = [(event, ()) for event in reversed(profiler.kineto_results.experimental_event_tree())]
    while pending:
        event, stack = pending.pop()
        if event.tag == _EventType.Allocation:
            events.append((event.start_time_ns, event.extra_fields.alloc_size, stack))
        else:
            pending.extend((child, (*stack, event.name)) for child in reversed(event.children))
    return sorted(events, key=lambda item: item[0])


def node_of(stack: Sequence[str]) -> str:
    """The innermost autograd node of an allocation, else its innermost non-aten op (forward)."""
    for name in reversed(stack):
        if name.startswith(NODE_PREFIX):
            return name[len(NODE_PREFIX) :]
    for name in reversed(stack):
        if not name.startswith("aten::"):
            return name
    return stack[-1] if stack else "(outside any op)"


def peaks_by_node(events) -> list[tuple[str, int]]:
    """Each node's largest live total (bytes above the start), in the order the peaks came."""
    live, best = 0, {}
    for when, size, stack in events:
        live += size
        node = node_of(stack)
        if live > best.get(node, (-1, 0))[0]:
            best[node] = (live, when)
    return [(node, peak) for node, (peak, _) in sorted(best.items(), key=lambda kv: kv[1][1])]


def step_peaks(data: Path, model: str, bits: int) -> list[tuple[str, int]]:
    """`peaks_by_node` of one CF step of `model` at `bits` on the CPU."""
    from torch.autograd.profiler import profile

    from tinykg_train.epoch import run_phase

    with tempfile.TemporaryDirectory() as tmp:
        session = open_step_session(data, model, bits, torch.device("cpu"), Path(tmp))
        batch = OneBatch(next(iter(session.cf_batches.epoch(0))))

        def step() -> None:
            run_phase(session, 0, "cf", batch, session.model.loss, measure=False)

        for _ in range(WARMUP_STEPS):
            step()
        with profile(profile_memory=True, use_kineto=False) as profiler:
            step()
    return peaks_by_node(allocation_events(profiler))


def dataset_dir(name: str) -> Path:
    """A shared dataset or dir (`resolve_dataset`), or `synthetic:USERS`: the synthetic KG of
    `bench_memory --peak`, made once under the benchmarks' data folder."""
    if not name.startswith("synthetic:"):
        return resolve_dataset(name)[1]
    from benchmarks._datasets import BENCH_DATA
    from benchmarks._peak_memory import synthetic_dataset

    return synthetic_dataset(int(name.split(":", 1)[1]), BENCH_DATA)


def report(model: str, bits: int, peaks: list[tuple[str, int]], rows: int) -> list[str]:
    top = sorted(peaks, key=lambda item: -item[1])[:rows]
    lines = [f"{model} bits {bits}: MiB live above the step's start, by node (largest first)"]
    lines += [f"{peak / 2**20:10.1f}  {node}" for node, peak in top]
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peak_by_node",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", default="synthetic:50000",
                        help="a ../shared/data name, synthetic:USERS or a dir")  # fmt: skip
    parser.add_argument("--model", choices=MODELS, default="kgat")
    parser.add_argument("--bits", type=int, choices=BITS, default=2)
    parser.add_argument("--gpu-blocks", action="store_true",
                        help="cut whole-graph ops into a GPU's blocks (at most 8 per op)")  # fmt: skip
    parser.add_argument("--rows", type=int, default=15, help="nodes listed (default 15)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.rows < 1:
        print("--rows needs to be at least 1", file=sys.stderr)
        return 2
    try:
        data = dataset_dir(args.dataset)
    except (DatasetUnavailable, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    with budgets_as_on("cuda") if args.gpu_blocks else contextlib.nullcontext():
        peaks = step_peaks(data, args.model, args.bits)
    for line in report(args.model, args.bits, peaks, args.rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
