"""Where a training run's peak resident memory is reached: the highest RSS while each part of the
run worked (building the session, the epoch's start, each phase's forward and backward, the
rankings), with glibc's heap counters at that moment.

    python -m benchmarks.rss_by_phase --data DIR --model kgat --bits 2 [any pipelines.train flag]

Runs `pipelines.train` with those flags in this process (`--no-mlflow` added). A thread reads the
resident set (`VmRSS`) every few milliseconds and charges each reading to the innermost part of the
run working then: `open session`, `epoch start` (KGAT's attention refresh), `cf forward`,
`cf backward`, `cf optimizer` (the rest of a step), `kg ...`, `ranking valid` / `ranking test`
(its propagation and its scoring), and `other` (checkpoints, reports). Each line: the part's
highest RSS, and at that reading what glibc's heap held in use, held free (kept for reuse,
resident or not) and what was mapped outside it (`mallinfo2`: blocks of 32 MiB and more with the
tuned allocator, so most whole-graph tensors). The part with the highest RSS is the run's peak;
RSS minus mapped minus heap in use is the interpreter, the libraries and the free heap still
resident. A diagnostic, not a section of BENCHMARKS.md; Linux only (reads /proc/self/status).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

SAMPLE_SECONDS = 0.003


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost",
        )
    ]  # fmt: skip


@functools.cache
def _mallinfo2():
    """glibc's `mallinfo2`, or None (not glibc, or older than 2.33)."""
    info = getattr(ctypes.CDLL(None), "mallinfo2", None)
    if info is not None:
        info.restype = _MallInfo2
    return info


def heap_counters() -> tuple[int, int, int] | None:
    """(heap in use, heap free, mapped outside the heap) in bytes, or None without glibc 2.33+."""
    info = _mallinfo2()
    if info is None:
        return None
    counters = info()
    return int(counters.uordblks), int(counters.fordblks), int(counters.hblkhd)


def resident_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    raise RuntimeError("no VmRSS in /proc/self/status (rss_by_phase needs Linux)")


@dataclass
class PartPeak:
    rss: int = 0
    heap: tuple[int, int, int] | None = None


@dataclass
class Recorder:
    """The part running now (a stack of names) and each part's highest reading."""

    stack: list[str] = field(default_factory=lambda: ["other"])
    peaks: dict[str, PartPeak] = field(default_factory=dict)
    stopped: threading.Event = field(default_factory=threading.Event)

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Charge readings to `name` inside the block; one reading at its end too, so a part
        shorter than the sampling interval still gets its line."""
        self.stack.append(name)
        try:
            yield
        finally:
            self.read()
            self.stack.pop()

    def read(self) -> None:
        """One reading, charged to the part running now (called by the sampling thread too)."""
        name, rss = self.stack[-1], resident_bytes()
        peak = self.peaks.setdefault(name, PartPeak())
        if rss > peak.rss:
            peak.rss, peak.heap = rss, heap_counters()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.read()
            time.sleep(SAMPLE_SECONDS)


def _wrap(restore: contextlib.ExitStack, owner, attribute: str, recorder: Recorder, name) -> None:
    """Charge the time inside `owner.attribute` to `name` (a string, or a function of the call's
    arguments giving one), until `restore` closes."""
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def charged(*args, **kwargs):
        label = name(*args, **kwargs) if callable(name) else name
        with recorder.part(label):
            return original(*args, **kwargs)

    setattr(owner, attribute, charged)
    restore.callback(setattr, owner, attribute, original)


@contextlib.contextmanager
def instrument(recorder: Recorder) -> Iterator[None]:
    """Inside the block, the trainer's parts (module functions, looked up at call time) charge
    their time to `recorder`."""
    import torch

    from tinykg_train import epoch, evaluate, trainer

    phase = {"name": "cf"}  # the phase running now, for its backward's label

    def ranking(evaluator, model, split, *args, **kwargs):
        return f"ranking {split}"

    def scoring(evaluator, model, users, split, *args):
        return f"ranking {split} scoring"

    with contextlib.ExitStack() as restore:
        _wrap(restore, trainer, "open_session", recorder, "open session")
        _wrap(restore, epoch, "epoch_start_measured", recorder, "epoch start")
        _wrap(restore, evaluate.RankingEvaluator, "evaluate", recorder, ranking)
        _wrap(restore, evaluate.RankingEvaluator, "_rank_users", recorder, scoring)
        backward = lambda *args, **kwargs: f"{phase['name']} backward"  # noqa: E731
        _wrap(restore, torch.autograd, "backward", recorder, backward)
        original_run_phase = epoch.run_phase

        def run_phase(session, epoch_, name, batches, loss_fn, measure):
            """The phase's forwards charged to `<name> forward`, the rest of its steps (Adam's
            step, batches) to `<name> optimizer`."""

            def forward(*args, **kwargs):
                with recorder.part(f"{name} forward"):
                    return loss_fn(*args, **kwargs)

            phase["name"] = name
            with recorder.part(f"{name} optimizer"):
                return original_run_phase(session, epoch_, name, batches, forward, measure)

        epoch.run_phase = run_phase
        restore.callback(setattr, epoch, "run_phase", original_run_phase)
        yield


def report(recorder: Recorder) -> str:
    mib = 1 << 20
    lines = ["part                     peak RSS MiB  heap in use  heap free  mapped"]
    for name, peak in sorted(recorder.peaks.items(), key=lambda item: -item[1].rss):
        counters = "  ".join(f"{value / mib:9,.0f}" for value in peak.heap) if peak.heap else "n/a"
        lines.append(f"{name:<24} {peak.rss / mib:12,.0f}  {counters}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    from pipelines.train import main as train_main

    recorder = Recorder()
    sampler = threading.Thread(target=recorder.run, daemon=True)
    sampler.start()
    try:
        with instrument(recorder):
            status = train_main([*argv, *([] if "--no-mlflow" in argv else ["--no-mlflow"])])
    finally:
        recorder.stopped.set()
        sampler.join()
    recorder.read()
    print(report(recorder))
    return status


if __name__ == "__main__":
    from pipelines._cli import run_cli

    sys.exit(run_cli(main))
