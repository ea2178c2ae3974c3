"""Helpers for the compress tests: gradient draws over seeds and the bias statistic."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace

import pytest
import torch

from tinykg_train.compress import CompressionConfig


def gradients(
    op: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor], probe: torch.Tensor
) -> list[torch.Tensor]:
    """Gradients of sum(op(*inputs) * probe) w.r.t. the inputs that require grad."""
    leaves = [t.detach().requires_grad_(t.requires_grad) for t in inputs]
    out = op(*leaves)
    wanted = [t for t in leaves if t.requires_grad]
    return list(torch.autograd.grad((out * probe).sum(), wanted))


def draws(
    op: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    probe: torch.Tensor,
    seeds: range,
) -> list[list[torch.Tensor]]:
    """Gradients for each seed (torch.manual_seed drives the stochastic rounding)."""
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        out.append(gradients(op, inputs, probe))
    return out


def bias_ratio(samples: Sequence[torch.Tensor], exact: torch.Tensor) -> float:
    """||mean - exact||^2 / (mean ||sample - exact||^2 / S).

    About 1 for an unbiased estimator (the mean's error is the noise averaged down by S); S for a
    deterministic biased one; 1 + S * bias^2 / variance in between. Robust to the noise level.
    """
    stacked = torch.stack([s.double() for s in samples])
    exact = exact.double()
    spread = ((stacked - exact) ** 2).sum(dim=tuple(range(1, stacked.dim()))).mean()
    error = ((stacked.mean(dim=0) - exact) ** 2).sum()
    return float(error / (spread / len(samples)))


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return float((approx.double() - exact.double()).norm() / exact.double().norm())


@pytest.fixture
def grad_tools():
    """The helpers above, as a namespace (tests import nothing from conftest)."""

    return SimpleNamespace(
        gradients=gradients, draws=draws, bias_ratio=bias_ratio, relative_error=relative_error
    )


# The compressed Functions with nothing actually compressed (every tensor is under min_numel):
# their hand-written backward formulas, checked exactly against finite differences and plain torch.
EXACT_FUNCTIONS = CompressionConfig(bits=8, min_numel=2**62)


@pytest.fixture
def exact_functions() -> CompressionConfig:
    return EXACT_FUNCTIONS
