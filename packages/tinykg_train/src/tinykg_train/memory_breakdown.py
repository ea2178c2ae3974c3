"""Where a run's memory goes: one training step's peak per phase, and evaluation's, measured once.

The first epoch a run trains measures one real optimizer step of each phase ("cf", and "kg" for
models with a KG phase): the phase's second step (Adam's state for the phase's parameters exists
by then, as in every later step), or its only one. The step runs exactly as it would unmeasured (the
same numbers); around it:
- before it, from the tensors themselves: `embedding_tables` (parameters with a row per user, item,
  entity or node), `other_parameters`, `graph_buffers` (the model's buffers), `optimizer_state`;
- during it (`tinykg_train.memory.allocation_peak`, opened after `zero_grad`, closed after
  `optimizer.step`): its peak; `activations`, the bytes autograd holds for backward after
  compression (`ActivationMeter`, innermost, as `activation_bytes`), and `gradients` (the `.grad`s
  the backward made). `temporaries` is the step's peak less those two: everything else the forward,
  backward and optimizer step allocate, as it stood at the peak (activations are partly freed and
  gradients partly made by then, so it is what the step adds beyond a full set of both).
So the parts sum to `peak`, the bytes allocated at the step's peak. On CUDA `other` adds what else
was allocated before the step (the batch, cached blocks in use); on the CPU the figures count
torch's tensors only: the process's resident set (`peak_rss_bytes`) adds the interpreter, NumPy
arrays, the dataset and the allocator's free lists.

The first evaluation is measured in two stages: `propagation` (`prepare_scoring`, above the
persistent parts), and `scoring_cache` (what it keeps for scoring) plus `score_blocks` (the peak of
ranking the users in blocks); its `peak` is the persistent parts plus the larger stage.

The first epoch's start hook (`on_epoch_start`: KGAT's attention refresh over every edge) is measured
too, when it allocates anything: `epoch_start` is the persistent parts plus the hook's own peak,
`work`. It can set a run's peak (KGAT on lfm1m, before its refresh was chunked finer).

The result is plain data in `TrainingState.memory_breakdown` (checkpointed: a resumed run keeps it
and does not measure again), written to metrics.json as `memory_breakdown`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from tinykg_train.memory import AllocationWindow, allocation_peak

#: The parts of a step's peak, in the order they are reported.
STEP_PARTS = (
    "embedding_tables",
    "other_parameters",
    "graph_buffers",
    "optimizer_state",
    "gradients",
    "activations",
    "temporaries",
)
#: The persistent parts an evaluation starts from.
HELD_PARTS = STEP_PARTS[:5]
EVALUATION = "evaluation"
EPOCH_START = "epoch_start"


def storage_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the storages behind `tensors`, each storage counted once."""
    seen: set[tuple[str, int]] = set()
    total = 0
    for tensor in tensors:
        if tensor is None:
            continue
        storage = tensor.untyped_storage()
        key = (str(tensor.device), storage.data_ptr())
        if key in seen:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def graph_sizes(model: torch.nn.Module) -> set[int]:
    """Row counts that mark an embedding table: users, items, entities and their sums (nodes)."""
    users, items, entities = (
        int(getattr(model, n, 0) or 0) for n in ("n_users", "n_items", "n_entities")
    )
    return {n for n in (users, items, entities, users + items, users + entities) if n > 0}


def model_parts(model: torch.nn.Module) -> dict[str, int]:
    """`embedding_tables`, `other_parameters` and `graph_buffers` of a model, in bytes."""
    sizes = graph_sizes(model)
    parameters = list(model.parameters())
    tables = [p for p in parameters if p.dim() >= 2 and p.shape[0] in sizes]
    table_ids = {id(p) for p in tables}
    return {
        "embedding_tables": storage_bytes(tables),
        "other_parameters": storage_bytes(p for p in parameters if id(p) not in table_ids),
        "graph_buffers": storage_bytes(model.buffers()),
    }


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the tensors an optimizer keeps per parameter (Adam: its two moments and step)."""
    return storage_bytes(
        value
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    )


def gradient_bytes(model: torch.nn.Module) -> int:
    return storage_bytes(p.grad for p in model.parameters())


def held_parts(session) -> dict[str, int]:
    """What the session holds between steps: the model's parts, optimizer state and gradients;
    row-wise tables (`session.tables`) add their device rows and Adam state."""
    parts = {
        **model_parts(session.model),
        "optimizer_state": optimizer_state_bytes(session.optimizer),
        "gradients": gradient_bytes(session.model),
    }
    tables = getattr(session, "tables", None)
    if tables is not None:
        device = tables.device_bytes()
        parts["embedding_tables"] += device["tables"]
        parts["optimizer_state"] += device["optimizer"]
    return parts


def cuda_context(window: AllocationWindow, held: dict[str, int]) -> dict[str, int]:
    """On CUDA, a measured row's `other` (what else was allocated before the window: the batch,
    cached blocks in use) and `cuda_peak_before_bytes` (the peak the window's reset replaced); on the
    CPU nothing."""
    context = {}
    if window.start_bytes is not None:
        context["other"] = int(window.start_bytes - sum(held.values()))
    if window.earlier_peak_bytes is not None:
        context["cuda_peak_before_bytes"] = int(window.earlier_peak_bytes)
    return context


class StepProbe:
    """Measures one optimizer step of a phase; see the module docstring.

    Created right after `zero_grad` (it opens the allocation window); the forward runs as
    `forward(loss_fn)(*batch)` inside the compression hooks; `close_on_error` is pushed on the
    step's exit stack; `finish()` is called after `optimizer.step()`.
    """

    def __init__(self, session, phase: str, epoch: int, step: int) -> None:
        from tinykg_train.compress import ActivationMeter

        self.session, self.phase, self.epoch, self.step = session, phase, epoch, step
        self.held = held_parts(session)
        self.meter = ActivationMeter(session.model)
        self._window_context = allocation_peak(session.device)
        self.window: AllocationWindow = self._window_context.__enter__()
        self._open = True

    def forward(self, loss_fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        """`loss_fn` under the probe's `ActivationMeter` (call it inside the compression hooks)."""

        def measured(*batch: torch.Tensor) -> torch.Tensor:
            with self.meter:
                return loss_fn(*batch)

        return measured

    def close_on_error(self, exc_type, exc, traceback) -> bool:
        """An `ExitStack.push` callback: a step that raised leaves no profiler running."""
        if exc_type is not None:
            self._close()
        return False

    def _close(self) -> None:
        if self._open:
            self._open = False
            self._window_context.__exit__(None, None, None)

    def finish(self) -> dict[str, Any]:
        """Close the window; store and return the phase's breakdown."""
        self._close()
        session, window = self.session, self.window
        created = optimizer_state_bytes(session.optimizer) - self.held["optimizer_state"]
        gradients = gradient_bytes(session.model)
        activations = int(self.meter.total_bytes)
        parts = {**self.held, "gradients": gradients, "activations": activations}
        parts["temporaries"] = window.peak_bytes - gradients - activations
        row: dict[str, Any] = {name: int(parts[name]) for name in STEP_PARTS}
        row.update(cuda_context(window, self.held))
        row["peak"] = int(sum(row[name] for name in (*STEP_PARTS, "other") if name in row))
        row.update(epoch=self.epoch, step=self.step, optimizer_state_made_in_step=int(created))
        session.state.memory_breakdown[self.phase] = row
        return row


def start_step_probe(session, phase: str, epoch: int, step: int, steps: int) -> StepProbe | None:
    """A probe for this step when it is the run's measured step of `phase` (its second step of the
    first epoch trained, or the only one of a one-step epoch), else None. `steps`: the phase's
    steps this epoch."""
    if phase in session.state.memory_breakdown or step != min(1, max(steps, 1) - 1):
        return None
    return StepProbe(session, phase, epoch, step)


def evaluate_measured(session, split: str) -> dict[str, float]:
    """`session.evaluator.evaluate(model, split)`; the run's first evaluation also stores the
    evaluation breakdown (module docstring)."""
    breakdown = session.state.memory_breakdown
    if EVALUATION in breakdown:
        return session.evaluator.evaluate(session.model, split)
    windows: dict[str, AllocationWindow] = {}

    @contextlib.contextmanager
    def stage(name: str) -> Iterator[None]:
        with allocation_peak(session.device) as window:
            yield
        windows[name] = window

    held = held_parts(session)
    metrics = session.evaluator.evaluate(session.model, split, stage=stage)
    if not windows:  # evaluated in another process (a data-parallel rank > 0 gets rank 0's)
        return metrics
    propagation, scoring = windows["propagation"], windows["scoring"]
    row: dict[str, Any] = {name: int(held[name]) for name in HELD_PARTS}
    if propagation.start_bytes is not None:
        row["other"] = int(propagation.start_bytes - sum(held.values()))
    row["propagation"] = int(propagation.peak_bytes)
    row["scoring_cache"] = int(propagation.end_bytes)
    row["score_blocks"] = int(scoring.peak_bytes)
    working = max(row["propagation"], row["scoring_cache"] + row["score_blocks"])
    row["peak"] = int(sum(row[name] for name in (*HELD_PARTS, "other") if name in row) + working)
    row["peak_stage"] = "propagation" if working == row["propagation"] else "scoring"
    breakdown[EVALUATION] = row
    return metrics


def epoch_start_measured(session, epoch: int) -> None:
    """`session.model.on_epoch_start(epoch)`; the run's first call also stores the `epoch_start`
    row (module docstring) when the hook allocates."""
    breakdown = session.state.memory_breakdown
    if EPOCH_START in breakdown:
        session.model.on_epoch_start(epoch)
        return
    held = held_parts(session)
    with allocation_peak(session.device) as window:
        session.model.on_epoch_start(epoch)
    if window.peak_bytes <= 0:
        return
    row: dict[str, Any] = {name: int(held[name]) for name in HELD_PARTS}
    row.update(cuda_context(window, held), work=int(window.peak_bytes))
    row["peak"] = int(sum(row[name] for name in (*HELD_PARTS, "other", "work") if name in row))
    row["epoch"] = epoch
    breakdown[EPOCH_START] = row


def run_peak(breakdown: dict[str, Any]) -> tuple[str | None, int | None]:
    """(phase, bytes) of the largest measured peak (a training phase or the evaluation)."""
    peaks = {name: row["peak"] for name, row in breakdown.items() if isinstance(row, dict)}
    if not peaks:
        return None, None
    name = max(peaks, key=peaks.get)
    return name, peaks[name]


def cuda_run_peak(breakdown: dict[str, Any], measured: int | None) -> int | None:
    """The run's `max_memory_allocated`: `measured` (since the probes' last reset of the counter)
    or a peak a probe's reset replaced, whichever is larger; None off CUDA."""
    if measured is None:
        return None
    earlier = [
        row.get("cuda_peak_before_bytes", 0) for row in breakdown.values() if isinstance(row, dict)
    ]
    return max([measured, *earlier])


def breakdown_metrics(breakdown: dict[str, Any]) -> dict[str, float]:
    """Flat MLflow metrics: `memory_<phase>_<part>` for every byte count, and `memory_peak`."""
    metrics: dict[str, float] = {}
    for phase, row in breakdown.items():
        if not isinstance(row, dict):
            continue
        for name, value in row.items():
            if (
                isinstance(value, int)
                and not isinstance(value, bool)
                and name not in ("epoch", "step")
            ):
                metrics[f"memory_{phase}_{name}"] = float(value)
    _, peak = run_peak(breakdown)
    if peak is not None:
        metrics["memory_peak"] = float(peak)
    return metrics


def summary_rows(breakdown: dict[str, Any]) -> list[tuple[str, str]]:
    """End-of-run summary rows: each phase's peak in MiB and its parts, largest first."""
    rows = []
    for phase, row in breakdown.items():
        if not isinstance(row, dict):
            continue
        names = HELD_PARTS + (
            ("scoring_cache", "score_blocks")
            if phase == EVALUATION
            else ("work",)
            if phase == EPOCH_START
            else STEP_PARTS[5:]
        )
        if phase == EVALUATION and row.get("peak_stage") == "propagation":
            names = (*HELD_PARTS, "propagation")
        parts = sorted(((row[n], n) for n in names if row.get(n)), reverse=True)
        text = ", ".join(f"{n.replace('_', ' ')} {v / 2**20:.0f}" for v, n in parts)
        rows.append((f"{phase} peak MiB", f"{row['peak'] / 2**20:.0f} ({text})"))
    return rows
