"""`AdaptivePrecision`: one run's `bits: auto` — when to measure, what widths to use, what it chose.

Each training phase (the CF steps; KGAT's KG steps) has its own sites. Before the first epoch, and
again every `adapt_every` epochs (GACT adapts its widths every so many steps as the gradients
change), the controller measures the sites' sensitivities on the epoch's first batch and chooses
the widths of least predicted gradient error within the run's budget: `average_bits` per quantized
element, or a byte budget for the sites when the run has a memory budget. Every step of the phase
then stores its sites at those widths. The plans travel in the checkpoint, so a resumed run uses
the widths the interrupted one had.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tinykg_train.compress.adaptive.allocate import Choice, allocate, stored_bytes
from tinykg_train.compress.adaptive.sensitivity import measure
from tinykg_train.compress.adaptive.sites import Site, WidthPlan, applying
from tinykg_train.compress.config import CompressionConfig

# Widths measured per site (1 bit departs from the rounding-variance law; wider ones follow it from
# 2 bits, see `allocate`).
PROBE_WIDTHS = (1, 2)


@dataclass(frozen=True)
class Probes:
    """A phase's sites and each site's measured gradient error at the probe widths; `held_bytes`:
    what its step held for backward with every site exact."""

    sites: tuple[Site, ...]
    errors: dict[int, tuple[float, ...]]
    held_bytes: int


@dataclass(frozen=True)
class PhasePlan:
    """A phase's measured sites and the widths chosen for them at `epoch`."""

    epoch: int
    probes: Probes
    choice: Choice

    @property
    def sites(self) -> tuple[Site, ...]:
        return self.probes.sites

    def by_module(self) -> dict[str, list[int]]:
        """Module name -> the widths of the sites it saves, in order ("" = the model itself)."""
        widths: dict[str, list[int]] = {}
        for site, bits in zip(self.sites, self.choice.widths, strict=True):
            widths.setdefault(site.module, []).append(bits)
        return widths

    def to_dict(self, config: CompressionConfig) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "average_bits": round(self.choice.average_bits(self.sites), 4),
            "bytes": self.choice.bytes,
            "predicted_error": self.choice.predicted_error,
            "held_bytes_exact": self.probes.held_bytes,
            "sites": [
                {
                    "site": site.index,
                    "module": site.module,
                    "shape": list(site.shape),
                    "requested_bits": site.requested_bits,
                    "bits": bits,
                    "bytes": stored_bytes(site, bits, config),
                    # measured gradient error by probe width (JSON keys are strings)
                    "sensitivity": {str(b): e[site.index] for b, e in self.probes.errors.items()},
                }
                for site, bits in zip(self.sites, self.choice.widths, strict=True)
            ],
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PhasePlan:
        sites = tuple(
            Site(s["site"], tuple(s["shape"]), s["requested_bits"], s["module"])
            for s in values["sites"]
        )
        widths_measured = sorted(int(b) for b in values["sites"][0]["sensitivity"]) if sites else []
        errors = {
            b: tuple(float(s["sensitivity"][str(b)]) for s in values["sites"])
            for b in widths_measured
        }
        probes = Probes(sites, errors, values["held_bytes_exact"])
        widths = tuple(int(s["bits"]) for s in values["sites"])
        choice = Choice(widths, values["bytes"], values["predicted_error"])
        return cls(values["epoch"], probes, choice)


class AdaptivePrecision:
    """Measures, chooses and applies the widths of one run's sites (see the module docstring)."""

    def __init__(
        self,
        compression: CompressionConfig,
        *,
        average_bits: float,
        adapt_every: int,
        probe_widths: tuple[int, ...] = PROBE_WIDTHS,
    ) -> None:
        self.compression = compression
        self.average_bits = float(average_bits)
        self.adapt_every = int(adapt_every)
        self.probe_widths = probe_widths
        self.site_budgets: dict[str, int] = {}  # phase -> bytes its sites may hold (memory budget)
        self.plans: dict[str, PhasePlan] = {}
        self.seconds = 0.0

    def due(self, phase: str, epoch: int) -> bool:
        """Whether to measure `phase` again before `epoch` (always before its first plan)."""
        plan = self.plans.get(phase)
        if plan is None:
            return True
        return self.adapt_every > 0 and epoch > plan.epoch and epoch % self.adapt_every == 0

    def measure(
        self, model: torch.nn.Module, loss_fn: Callable[..., torch.Tensor], batch: Sequence
    ) -> Probes:
        """The sites' errors on `batch` at each probe width; the seconds spent add to `seconds`."""
        start = time.perf_counter()
        try:
            measured = {
                b: measure(model, loss_fn, batch, self.compression, probe_bits=b)
                for b in self.probe_widths
            }
        finally:
            self.seconds += time.perf_counter() - start
        first = measured[self.probe_widths[0]]
        return Probes(first.sites, {b: m.errors for b, m in measured.items()}, first.held_bytes)

    def choose(self, phase: str, epoch: int, probes: Probes) -> PhasePlan:
        """The widths for `phase` from `probes`, within the phase's byte budget when it has one
        (a memory budget), else within `average_bits`."""
        budget = self.site_budgets.get(phase)
        choice = allocate(
            probes.sites,
            probes.errors,
            self.compression,
            average_bits=None if budget is not None else self.average_bits,
            budget_bytes=budget,
        )
        plan = PhasePlan(epoch, probes, choice)
        self.plans[phase] = plan
        return plan

    def adapt(
        self,
        phase: str,
        epoch: int,
        model: torch.nn.Module,
        loss_fn: Callable[..., torch.Tensor],
        batch: Sequence,
    ) -> PhasePlan:
        """Measure on `batch` and choose `phase`'s widths."""
        return self.choose(phase, epoch, self.measure(model, loss_fn, batch))

    @contextlib.contextmanager
    def applying(self, phase: str) -> Iterator[None]:
        """Store the block's sites at `phase`'s chosen widths (the ops' own widths before a plan)."""
        plan = self.plans.get(phase)
        if plan is None:
            yield
            return
        with applying(WidthPlan(plan.choice.widths)):
            yield

    # -- what it chose ------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """For metrics.json: the target, and per phase the latest plan, its sites and widths."""
        return {
            "target_average_bits": None if self.site_budgets else self.average_bits,
            "site_budget_bytes": dict(self.site_budgets) or None,
            "adapt_every": self.adapt_every,
            "adapt_seconds": round(self.seconds, 3),
            "phases": {p: plan.to_dict(self.compression) for p, plan in self.plans.items()},
        }

    def average_bits_by_phase(self) -> dict[str, float]:
        """`average_bits_<phase>`: the average width of each phase's current plan (an epoch metric)."""
        return {
            f"average_bits_{phase}": round(plan.choice.average_bits(plan.sites), 4)
            for phase, plan in self.plans.items()
        }

    def cf_module_widths(self) -> dict[str, str]:
        """Module -> the widths of its sites in the CF phase ("4,2"): the activation-memory table's
        `bits` column (the table is measured on a CF step)."""
        plan = self.plans.get("cf")
        if plan is None:
            return {}
        return {module: ",".join(map(str, w)) for module, w in plan.by_module().items()}

    def summary(self) -> str:
        lines = []
        for phase, plan in self.plans.items():
            choice = plan.choice
            modules = "; ".join(
                (module or "model") + " " + ",".join(map(str, widths))
                for module, widths in plan.by_module().items()
            )
            lines.append(
                f"bits auto, {phase} phase: {len(plan.sites)} quantized tensors at "
                f"{choice.average_bits(plan.sites):.2f} bits on average ({modules}), "
                f"{choice.bytes / 2**20:.2f} MiB"
            )
        return "\n".join(lines)

    # -- checkpoint ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "plans": {p: plan.to_dict(self.compression) for p, plan in self.plans.items()},
            "site_budgets": dict(self.site_budgets),
            "seconds": self.seconds,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.plans = {p: PhasePlan.from_dict(v) for p, v in state["plans"].items()}
        self.site_budgets = dict(state["site_budgets"])
        self.seconds = float(state["seconds"])
