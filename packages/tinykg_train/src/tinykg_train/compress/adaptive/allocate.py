"""Choosing each site's width: least predicted gradient error within a budget of bits or bytes.

Stochastic rounding to `b` bits adds noise of variance proportional to the squared step between
levels, `(range / (2**b - 1))**2`, independently per element; the error it puts into the step's
gradient scales the same way. So a site's error measured at one width (`sensitivity.measure`)
predicts the wider ones: `error(b) = error(p) * ((2**p - 1) / (2**b - 1))**2` from the widest
measured width p below b (32 = exact: no error). Measured (docs/precision.md), the law holds from
2 bits up (4 bits: 0.02-0.05 of 2 bits' error; 8 bits: 0.0036 of 4 bits') but not at 1 bit, where
one pair of levels per group of rows errs 10-55x 2 bits' error rather than 9x: the narrowest widths
are measured. Errors of different sites add (independent noise), so the plan that
minimises their sum within a budget is a separable knapsack; with errors convex and decreasing in
the width, taking the upgrade with the most error removed per added byte (or bit) until the budget
is spent is what ActNN and GACT do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tinykg_kernels.packing import GroupLayout
from tinykg_train.compress.adaptive.sites import EXACT, Site
from tinykg_train.compress.config import CompressionConfig

WIDTHS = (1, 2, 4, 8, EXACT)
PARAMETER_BYTES = 4  # a 16-bit scale and a 16-bit zero point per group


def predicted_error(probe_error: float, probe_bits: int, bits: int) -> float:
    """The gradient error of a site at `bits`, from the error measured at `probe_bits`."""
    if bits >= EXACT:
        return 0.0
    return probe_error * ((2**probe_bits - 1) / (2**bits - 1)) ** 2


def site_error(measured: Mapping[int, float], bits: int) -> float:
    """A site's error at `bits`: measured there, else from the widest measured width below it
    (`predicted_error`); a width below every measured one takes the narrowest measurement's."""
    if bits >= EXACT:
        return 0.0
    if bits in measured:
        return measured[bits]
    below = [b for b in measured if b < bits]
    probe = max(below) if below else min(measured)
    return predicted_error(measured[probe], probe, bits)


def stored_bytes(site: Site, bits: int, config: CompressionConfig) -> int:
    """Bytes the codec stores for the site at `bits` (packed codes + per-group parameters), or its
    float32 bytes kept exact: what `QuantizedTensor.nbytes` counts, without quantizing."""
    if bits >= EXACT:
        return site.numel * 4
    width_config = config.at_width(bits)
    layout = GroupLayout.for_shape(site.shape, width_config.group_for(site.shape), bits)
    return layout.n_groups * (layout.bytes_per_group + PARAMETER_BYTES)


@dataclass(frozen=True)
class Choice:
    """The chosen widths (by site) and what they cost and leave."""

    widths: tuple[int, ...]
    bytes: int
    predicted_error: float

    def average_bits(self, sites: Sequence[Site]) -> float:
        total = sum(s.numel for s in sites)
        return sum(s.numel * b for s, b in zip(sites, self.widths, strict=True)) / max(total, 1)


def allocate(
    sites: Sequence[Site],
    errors: Mapping[int, Sequence[float]],
    config: CompressionConfig,
    *,
    average_bits: float | None = None,
    budget_bytes: int | None = None,
    widths: Sequence[int] = WIDTHS,
) -> Choice:
    """Widths for `sites` within `average_bits` per element and/or `budget_bytes`, least predicted
    error first. `errors`: measured width -> each site's error there (`site_error` predicts the
    others). Every site starts at the narrowest width; an upgrade that breaks a budget is skipped.
    Raises ValueError when even the narrowest widths break it."""
    widths = sorted(widths)
    measured = [{b: errors[b][i] for b in errors} for i in range(len(sites))]
    level = [0] * len(sites)
    elements = sum(s.numel for s in sites)
    bit_budget = None if average_bits is None else average_bits * elements

    def cost(index: int, bits: int) -> tuple[int, int]:
        return stored_bytes(sites[index], bits, config), sites[index].numel * bits

    spent_bytes = sum(cost(i, widths[0])[0] for i in range(len(sites)))
    spent_bits = sum(cost(i, widths[0])[1] for i in range(len(sites)))
    if (budget_bytes is not None and spent_bytes > budget_bytes) or (
        bit_budget is not None and spent_bits > bit_budget + 1e-9
    ):
        raise ValueError("the budget is below what every site at the narrowest width needs")
    while True:
        best, best_gain = None, 0.0
        for i in range(len(sites)):
            if level[i] + 1 >= len(widths):
                continue
            now, up = widths[level[i]], widths[level[i] + 1]
            add_bytes = cost(i, up)[0] - cost(i, now)[0]
            add_bits = cost(i, up)[1] - cost(i, now)[1]
            if budget_bytes is not None and spent_bytes + add_bytes > budget_bytes:
                continue
            if bit_budget is not None and spent_bits + add_bits > bit_budget + 1e-9:
                continue
            removed = site_error(measured[i], now) - site_error(measured[i], up)
            gain = removed / max(add_bytes if budget_bytes is not None else add_bits, 1)
            if best is None or gain > best_gain:
                best, best_gain = i, gain
        if best is None or best_gain <= 0:
            break
        now, up = widths[level[best]], widths[level[best] + 1]
        spent_bytes += cost(best, up)[0] - cost(best, now)[0]
        spent_bits += cost(best, up)[1] - cost(best, now)[1]
        level[best] += 1
    chosen = tuple(widths[k] for k in level)
    return Choice(
        chosen,
        sum(stored_bytes(s, b, config) for s, b in zip(sites, chosen, strict=True)),
        sum(site_error(m, b) for m, b in zip(measured, chosen, strict=True)),
    )
