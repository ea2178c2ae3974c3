"""Adam with compact state for embedding tables (`--rowwise-adam`): FBGEMM's partial row-wise Adam.

Dense Adam keeps two float32 moments per table element, twice the table itself: at 10M triples
KGAT's node table is 305 MiB and its moments 610 MiB, the same at every activation width. Here a
table (a parameter of a group with `rowwise=True`, `[rows, dim]`) keeps

- the first moment per element in bfloat16, written back with stochastic rounding (unbiased, so
  the moving average does not stall on rounding as round-to-nearest would: with beta1 = 0.9 its
  rounding noise settles at about 0.3% of the value), stored as its int16 bits so that
  `Optimizer.load_state_dict` (which casts floating-point state to the parameter's dtype) leaves
  it as it is;
- the second moment per row, the moving average of the row's mean squared gradient (as FBGEMM's
  and TorchRec's `PARTIAL_ROWWISE_ADAM`), so each row's step is scaled by one number.

That is 2 bytes per element plus 4 per row where Adam keeps 8 per element (0.26 of Adam's state at
64 columns). The update runs a block of rows at a time, so its float32 temporaries stay small
beside the table. Other parameters get Adam's own arithmetic (torch's single-tensor path).

The rounding noise comes from a generator seeded by (seed, step, parameter index), so a resumed run
draws what the uninterrupted one would, and data-parallel replicas stay identical.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

#: rows updated at once: a block's float32 temporaries are `BLOCK_ELEMENTS * 4` bytes each
BLOCK_ELEMENTS = 1 << 20
_LOW_BITS = 1 << 16  # the float32 bits a bfloat16 drops


def round_to_bfloat16(values: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """float32 `values` rounded stochastically to bfloat16, returned as its int16 bits: up to the
    next bfloat16 (in magnitude) with probability the dropped bits' share of a step, so the
    expected value is `values` exactly. Infinities and NaN keep their class."""
    bits = values.view(torch.int32)
    noise = torch.randint(
        0, _LOW_BITS, values.shape, dtype=torch.int32, device=values.device, generator=generator
    )
    finite = values.isfinite()
    rounded = torch.where(finite, bits + noise, bits)  # a carry steps to the next magnitude
    return (rounded >> 16).to(torch.int16)


def bfloat16_bits_to_float(bits: torch.Tensor) -> torch.Tensor:
    """The float32 values of bfloat16 numbers stored as int16 bits (`round_to_bfloat16`)."""
    return bits.view(torch.bfloat16).float()


class RowwiseAdam(torch.optim.Optimizer):
    """Adam; parameter groups with `rowwise=True` hold `[rows, dim]` tables trained with the
    compact state of the module docstring. `seed` seeds the stochastic rounding."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        seed: int = 0,
    ) -> None:
        if not lr > 0 or not eps >= 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"RowwiseAdam needs lr > 0, eps >= 0, betas in [0, 1) (got {lr}, {eps}, {betas})")  # fmt: skip
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "rowwise": False})
        self.seed = int(seed)
        for group in self.param_groups:
            if group["rowwise"]:
                for p in group["params"]:
                    if p.dim() != 2:
                        raise ValueError(
                            f"a rowwise group holds [rows, dim] tables (got a parameter of shape {tuple(p.shape)})"
                        )

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch's signature
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("RowwiseAdam takes dense gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    if group["rowwise"]:
                        state["exp_avg_bits"] = torch.zeros_like(p, dtype=torch.int16)
                        state["exp_avg_sq_row"] = torch.zeros(p.shape[0], device=p.device)
                    else:
                        state["exp_avg"] = torch.zeros_like(p)
                        state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                step = int(state["step"].item())
                if group["rowwise"]:
                    self._rowwise_update(p, state, group, step, index)
                else:
                    _adam_update(p, state, group, step)
        return loss

    def _rowwise_update(self, p, state, group, step: int, index: int) -> None:
        beta1, beta2 = group["betas"]
        step_size = group["lr"] / (1 - beta1**step)
        root_correction = math.sqrt(1 - beta2**step)
        generator = torch.Generator(device=p.device)
        generator.manual_seed(((self.seed * 1_000_003 + step) * 1_000_003 + index) % 2**63)
        bits, second, grad = state["exp_avg_bits"], state["exp_avg_sq_row"], p.grad
        rows = max(1, BLOCK_ELEMENTS // max(p.shape[1], 1))
        for start in range(0, p.shape[0], rows):
            block = slice(start, start + rows)
            g = grad[block]
            first = bfloat16_bits_to_float(bits[block]).lerp_(g, 1 - beta1)
            row_second = second[block]
            row_second.mul_(beta2).add_(g.square().mean(dim=1), alpha=1 - beta2)
            denom = row_second.sqrt().div_(root_correction).add_(group["eps"])
            p[block].addcdiv_(first, denom.unsqueeze(1), value=-step_size)
            bits[block] = round_to_bfloat16(first, generator)

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's, then the first moments' bits back to int16 (torch casts every state tensor of
        a float parameter to its dtype; int16 values survive float32 exactly)."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            if "exp_avg_bits" in state:
                state["exp_avg_bits"] = state["exp_avg_bits"].to(torch.int16)

    def state_bytes(self) -> int:
        """Bytes of every state tensor (moments and step counts)."""
        return sum(
            t.numel() * t.element_size()
            for state in self.state.values()
            for t in state.values()
            if isinstance(t, torch.Tensor)
        )


def _adam_update(p, state, group, step: int) -> None:
    """torch.optim.Adam's single-tensor update (no weight decay, no amsgrad)."""
    beta1, beta2 = group["betas"]
    grad, exp_avg, exp_avg_sq = p.grad, state["exp_avg"], state["exp_avg_sq"]
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(group["eps"])
    p.addcdiv_(exp_avg, denom, value=-group["lr"] / (1 - beta1**step))


def moment_bytes(parameter: torch.Tensor, rowwise: bool) -> int:
    """Bytes of the moments kept for `parameter`: Adam's two, or a table's compact pair."""
    if rowwise:
        return parameter.numel() * 2 + parameter.shape[0] * 4
    return 2 * parameter.numel() * parameter.element_size()


def table_ids(model: torch.nn.Module) -> set[int]:
    """`id()`s of the model's `embedding_tables` parameters."""
    return {id(getattr(model, name)) for name in getattr(model, "embedding_tables", ())}


def table_groups(model: torch.nn.Module, parameters: Iterable[torch.nn.Parameter]) -> list[dict]:
    """`parameters` as RowwiseAdam's groups: the model's `embedding_tables` rowwise, the rest not
    (a group left empty is dropped)."""
    tables, parameters = table_ids(model), list(parameters)
    groups = [
        {"params": [p for p in parameters if id(p) in tables], "rowwise": True},
        {"params": [p for p in parameters if id(p) not in tables], "rowwise": False},
    ]
    return [g for g in groups if g["params"]]
