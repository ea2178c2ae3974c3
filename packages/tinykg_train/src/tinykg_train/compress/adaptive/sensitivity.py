"""How much each site's rounding perturbs a step's gradient, measured on one real batch.

One pass with every site kept exact gives the exact gradient `g` and lists the sites; then one pass
per site quantizes that site alone at the probe width. Its sensitivity is the relative squared
error it adds, `||g_site - g||^2 / ||g||^2` over every parameter gradient. Each pass starts from
the same random state, so dropout masks (and KGIN's dropped edges) are the same in all of them, and
the rounding noise comes from its own generator: the differences are the rounding's alone. The
run's random stream is left as it was, so measuring changes no later draw.

The same error per parameter, `||g_site,p - g_p||^2 / ||g_p||^2`, says whose gradient a site's
rounding hits: the sum over every parameter weighs each by its share of the gradient's squared norm,
so a tensor with a small share (a relation embedding, a layer's weight) can get a large relative
error that the sum hardly shows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from tinykg_train.compress.adaptive.sites import Site, WidthPlan, applying
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.meter import ActivationMeter
from tinykg_train.compress.saved_tensors import compress_saved_tensors

PROBE_BITS = 2


@dataclass(frozen=True)
class Sensitivity:
    """The sites of one phase's step and the relative squared gradient error of each at the probe
    width (mean over the draws of the rounding noise); `bias`: the relative squared error of the
    draws' mean gradient (with `draws` > 1; near error / draws for unbiased rounding, near error
    for a biased one); `held_bytes` is what the exact pass held for backward (sites exact);
    `by_parameter`: per site, each parameter's own relative squared error (the parameters the
    exact pass gave a nonzero gradient, by name; mean over the draws)."""

    sites: tuple[Site, ...]
    errors: tuple[float, ...]
    probe_bits: int
    held_bytes: int
    bias: tuple[float, ...] | None = None
    draws: int = 1
    by_parameter: tuple[dict[str, float], ...] = ()


def gradient(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter's gradient, flattened into one vector (zeros where there is none)."""
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
            for p in model.parameters()
        ]
    )


def parameter_slices(model: torch.nn.Module) -> list[tuple[str, slice]]:
    """Each parameter's name and its slice of `gradient(model)`."""
    slices, start = [], 0
    for name, parameter in model.named_parameters():
        slices.append((name, slice(start, start + parameter.numel())))
        start += parameter.numel()
    return slices


def sums_by_parameter(
    squares: torch.Tensor, slices: Sequence[tuple[str, slice]]
) -> dict[str, float]:
    """The sum of `squares` (a squared gradient-shaped vector) over each parameter's slice."""
    return {name: float(squares[part].sum()) for name, part in slices}


def measure(
    model: torch.nn.Module,
    loss_fn: Callable[..., torch.Tensor],
    batch: Sequence[torch.Tensor],
    compression: CompressionConfig,
    *,
    probe_bits: int = PROBE_BITS,
    seed: int = 0,
    draws: int = 1,
) -> Sensitivity:
    """Sensitivities of the sites of `loss_fn(*batch)` (the model's training mode as it is), over
    `draws` draws of each site's rounding noise."""
    device = next(model.parameters()).device
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        start = torch.get_rng_state(), (torch.cuda.get_rng_state(device) if devices else None)

        def run_pass(plan: WidthPlan | None, meter=None, draw=0, **kwargs) -> torch.Tensor:
            torch.set_rng_state(start[0])
            if devices:
                torch.cuda.set_rng_state(start[1], device)
            noise = torch.Generator().manual_seed(seed * 1_000_003 + draw)
            model.zero_grad(set_to_none=True)
            with compress_saved_tensors(compression), applying(plan, noise=noise, **kwargs):
                with meter if meter is not None else contextlib.nullcontext():
                    loss = loss_fn(*batch)  # held bytes: what is still saved when the forward ends
                loss.backward()
            return gradient(model)

        sites: list[Site] = []
        meter = ActivationMeter(model)
        exact = run_pass(
            None, meter, all_exact=True, record=sites, module_of=lambda: meter.current_module
        )
        held = meter.total_bytes
        exact_squares = exact.pow(2)
        scale = float(exact_squares.sum()) or 1.0
        slices = parameter_slices(model)
        exact_by_parameter = {
            name: norm
            for name, norm in sums_by_parameter(exact_squares, slices).items()
            if norm > 0
        }
        del exact_squares  # gradient-sized; not kept through the draws
        slices = [(name, part) for name, part in slices if name in exact_by_parameter]
        errors, biases, by_parameter = [], [], []
        base = WidthPlan.exact(len(sites))
        for site in sites:
            plan, total, squared = base.with_width(site.index, probe_bits), 0.0, 0.0
            parameter_squared = dict.fromkeys(exact_by_parameter, 0.0)
            for draw in range(draws):
                perturbed = run_pass(plan, draw=draw)
                squares = (perturbed - exact).pow(2)
                squared += float(squares.sum()) / scale
                for name, value in sums_by_parameter(squares, slices).items():
                    parameter_squared[name] += value
                total = perturbed + total
            errors.append(squared / draws)
            biases.append(float((total / draws - exact).pow(2).sum()) / scale)
            by_parameter.append(
                {n: v / draws / exact_by_parameter[n] for n, v in parameter_squared.items()}
            )
    model.zero_grad(set_to_none=True)
    bias = tuple(biases) if draws > 1 else None
    return Sensitivity(
        tuple(sites), tuple(errors), probe_bits, int(held), bias, draws, tuple(by_parameter)
    )
