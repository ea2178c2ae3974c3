"""Sites: the quantized saved tensors of one training step, numbered in the order they are stored.

A step of a given model saves the same tensors in the same order every time (its shapes may change
with the batch, KGIN's dropped edges or a sampled subgraph; its order does not), so the n-th
tensor the codec quantizes in a step is the same *site* from step to step. GACT identifies its
per-tensor widths the same way. A `WidthPlan` gives each site of a phase its width; while one is
applied (`applying`), `codec.compress` asks `width_for` before quantizing and stores the tensor at
that width (32 = kept exact). Recording (`applying(plan, record=sites)`) lists the sites as they
are met: shape, elements, the width the op asked for and the module that saved it.

Only quantized tensors are sites: rows gathered from a parameter (stored as indices), 1-bit masks
and parameters stay as they are whatever the plan says.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

EXACT = 32


@dataclass(frozen=True)
class Site:
    """One quantized saved tensor of a step, as met while recording."""

    index: int
    shape: tuple[int, ...]
    requested_bits: int  # what the op asked for (its config, floors like score_bits included)
    module: str

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count


@dataclass(frozen=True)
class WidthPlan:
    """The width of each site of one phase, by site index; sites past the end keep the op's own."""

    widths: tuple[int, ...]

    @classmethod
    def exact(cls, n_sites: int) -> WidthPlan:
        return cls((EXACT,) * n_sites)

    def with_width(self, index: int, bits: int) -> WidthPlan:
        widths = list(self.widths)
        widths[index] = bits
        return WidthPlan(tuple(widths))


class _Applied(threading.local):
    def __init__(self) -> None:
        self.plan: WidthPlan | None = None
        self.cursor = 0
        self.record: list[Site] | None = None
        self.module_of: Callable[[], str] | None = None
        self.all_exact = False
        self.noise: torch.Generator | None = None


_applied = _Applied()


@contextmanager
def applying(
    plan: WidthPlan | None,
    *,
    record: list[Site] | None = None,
    module_of: Callable[[], str] | None = None,
    all_exact: bool = False,
    noise: torch.Generator | None = None,
) -> Iterator[None]:
    """Store this block's quantized saves per `plan` (site i at `plan.widths[i]`).

    `record`: a list that receives every site met, in order. `module_of()`: the name of the module
    running (recorded with each site). `all_exact`: every site kept exact whatever its index (a
    recording pass that needs the exact gradient before the number of sites is known). `noise`: a
    generator the sites' rounding seeds come from instead of torch's default one (so measuring
    passes draw the same dropout masks whichever sites they quantize).
    """
    fields = ("plan", "cursor", "record", "module_of", "all_exact", "noise")
    previous = tuple(getattr(_applied, name) for name in fields)
    for name, value in zip(fields, (plan, 0, record, module_of, all_exact, noise), strict=True):
        setattr(_applied, name, value)
    try:
        yield
    finally:
        for name, value in zip(fields, previous, strict=True):
            setattr(_applied, name, value)


def active() -> bool:
    return _applied.plan is not None or _applied.all_exact


def rounding_seed() -> int | None:
    """A seed for the next site's stochastic rounding from the applied `noise` generator, or None
    (the codec then draws one from torch's default generator, as without a plan)."""
    if _applied.noise is None:
        return None
    return int(torch.randint(0, 2**31 - 1, (), generator=_applied.noise))


def width_for(tensor: torch.Tensor, requested_bits: int) -> int | None:
    """The width the applied plan gives the next site (None: no plan applies, or the step has more
    sites than the plan knows: the op's own width). Advances the site cursor."""
    if not active():
        return None
    index = _applied.cursor
    _applied.cursor += 1
    if _applied.record is not None:
        module = _applied.module_of() if _applied.module_of is not None else ""
        _applied.record.append(Site(index, tuple(tensor.shape), requested_bits, module))
    if _applied.all_exact:
        return EXACT
    widths = _applied.plan.widths
    return widths[index] if index < len(widths) else None
