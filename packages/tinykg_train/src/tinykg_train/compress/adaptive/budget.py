"""`memory_budget`: the widths whose training step fits a stated size, or a refusal before training.

What one training step uses, measured before the first epoch on its first batch:
- *model state*, held all along: parameters, Adam's two moments per parameter (a table's compact
  ones with `adam_state`), graph buffers;
- the *step* itself, from its start to the end of its backward: activations held for backward,
  gradients, and temporaries. Its peak is measured: on CUDA the allocator's `max_memory_allocated`,
  on the CPU the running sum of the bytes each op allocates and frees (`torch.profiler` with
  `profile_memory`), both relative to what was allocated before the step.
The step's peak with every site exact, less the sites' exact bytes, is what the chosen widths add
to; so the sites of a phase may hold `budget - model state - (exact peak - exact site bytes)`.
The process's own baseline (the interpreter, libraries, allocator caches) is not counted.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from tinykg_train.compact_adam import moment_bytes, table_ids
from tinykg_train.compress.adaptive.allocate import stored_bytes
from tinykg_train.compress.adaptive.sites import applying
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.saved_tensors import compress_saved_tensors
from tinykg_train.errors import ConfigError
from tinykg_train.memory import allocation_peak


def size_text(size: float, *, space: str = " ", up: bool = False) -> str:
    """Bytes as a decimal size in the unit that fits ("520.0 kB", "412.3 MB", "1.51 GB"), the units
    `memory_budget` takes; `up` rounds up (a least budget that must still fit)."""
    for unit, scale, digits in (("GB", 1e9, 2), ("MB", 1e6, 1), ("kB", 1e3, 1)):
        if size >= scale or unit == "kB":
            value = size / scale
            if up:
                value = math.ceil(value * 10**digits) / 10**digits
            return f"{value:.{digits}f}{space}{unit}"
    raise AssertionError("unreachable")


def model_state_bytes(model: torch.nn.Module, *, adam_state: str = "float32") -> int:
    """Parameters, the optimizer's moments of each (the tables' as `adam_state`), and the model's
    buffers (graph tensors)."""
    tables = table_ids(model)
    parameters = sum(
        p.numel() * p.element_size() + moment_bytes(p, adam_state if id(p) in tables else "float32")
        for p in model.parameters()
    )
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return parameters + buffers


def step_peak_bytes(step: Callable[[], None], device: torch.device) -> int:
    """The most bytes allocated at once while `step()` runs, beyond those allocated before it
    (`tinykg_train.memory.allocation_peak`)."""
    with allocation_peak(device) as window:
        step()
    return window.peak_bytes


@dataclass(frozen=True)
class PhaseMemory:
    """One phase's step, measured: the model state, the step's peak at FP32 and with every site
    exact under compression, and the sites' exact bytes."""

    model_state: int
    fp32_peak: int
    exact_peak: int
    exact_site_bytes: int

    @property
    def fixed(self) -> int:
        """What a step uses whatever the sites' widths."""
        return self.model_state + max(self.exact_peak - self.exact_site_bytes, 0)

    @property
    def fp32_total(self) -> int:
        return self.model_state + self.fp32_peak


def measure_phase(
    model,
    loss_fn: Callable[..., torch.Tensor],
    batch: Sequence[torch.Tensor],
    compression: CompressionConfig,
    sites,
    *,
    adam_state: str = "float32",
) -> PhaseMemory:
    """Profile one step of the phase at FP32 and with every site exact (random state restored);
    `adam_state`: the form of the tables' Adam state."""
    device = next(model.parameters()).device
    devices = [device] if device.type == "cuda" else []

    def step(compressed: bool) -> None:
        model.zero_grad(set_to_none=True)
        context = (
            contextlib.ExitStack()
            if not compressed
            else _stacked(compress_saved_tensors(compression), applying(None, all_exact=True))
        )
        with context:
            loss = loss_fn(*batch)
            loss.backward()
        del loss

    with torch.random.fork_rng(devices=devices):
        state = torch.get_rng_state()
        model.set_compression(CompressionConfig(bits=32))
        try:
            fp32 = step_peak_bytes(lambda: step(False), device)
        finally:
            model.set_compression(compression)
        torch.set_rng_state(state)
        exact = step_peak_bytes(lambda: step(True), device)
    model.zero_grad(set_to_none=True)
    exact_sites = sum(s.numel * 4 for s in sites)
    return PhaseMemory(model_state_bytes(model, adam_state=adam_state), fp32, exact, exact_sites)


def _stacked(*contexts) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    for context in contexts:
        stack.enter_context(context)
    return stack


def site_budget(budget: int, memory: PhaseMemory, sites, compression: CompressionConfig) -> int:
    """Bytes the phase's sites may hold under `budget`; a ConfigError naming the least budget that
    fits when even every site at 1 bit does not."""
    narrowest = sum(stored_bytes(s, 1, compression) for s in sites)
    least = memory.fixed + narrowest
    if budget < least:
        raise ConfigError(
            f"memory budget {size_text(budget)} is below what one training step needs even at 1 "
            f"bit: {size_text(least)} (model state {size_text(memory.model_state)}, the step's "
            f"other bytes {size_text(memory.fixed - memory.model_state)}, activations at 1 bit "
            f"{size_text(narrowest)}); raise --memory-budget to at least "
            f"{size_text(least, space='', up=True)}"
        )
    return budget - memory.fixed
