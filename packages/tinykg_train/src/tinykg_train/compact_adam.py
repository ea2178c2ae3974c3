"""Adam with compact state for the embedding tables (`--adam-state bfloat16|rowwise`).

Dense Adam keeps two float32 moments per table element, twice the table itself: at 10M triples
KGAT's node table is 305 MiB and its moments 610 MiB, the same at every activation width. Here a
table (a parameter of a group whose `state` is not "float32", `[rows, dim]`) keeps

- `bfloat16`: both moments per element in bfloat16, 0.5 of Adam's state;
- `rowwise`: the first moment per element in bfloat16 and the second per row, the moving average
  of the row's mean squared gradient (FBGEMM's and TorchRec's `PARTIAL_ROWWISE_ADAM`): each row's
  step is scaled by one number; 2 bytes per element plus 4 per row, 0.26 of Adam's at 64 columns.

A bfloat16 moment is written back with stochastic rounding (unbiased, so a moving average does not
stall on updates smaller than half a bfloat16 step, as round-to-nearest would let it: beta2 =
0.999 adds 0.1% a step) and stored as its int16 bits, so that `Optimizer.load_state_dict` (which
casts every state tensor of a float parameter to its dtype) can be undone exactly. The update runs
a block of rows at a time, so its float32 temporaries stay small beside the table. Other
parameters ("float32" groups) get Adam's own arithmetic, bit for bit, the denominator made a block
at a time too (torch's one-tensor step makes two parameter-sized temporaries on the CPU).

It is the run's optimizer at every `--adam-state` (`session.dense_optimizer`), also the default
float32 one: torch's own Adam loads torch's compiler on its first step (`eager_optimizer`).

The rounding noise comes from a generator seeded by (seed, step, parameter index), so a resumed run
draws what the uninterrupted one would, and data-parallel replicas draw alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from tinykg_train.config import ADAM_STATES as STATES  # Adam's float32, or a compact form above
from tinykg_train.eager_optimizer import EagerOptimizer

#: rows updated at once: a block's float32 temporaries are `BLOCK_ELEMENTS * 4` bytes each
BLOCK_ELEMENTS = 1 << 20
_LOW_BITS = 1 << 16  # the float32 bits a bfloat16 drops
_BITS_KEYS = ("exp_avg_bits", "exp_avg_sq_bits")  # int16 state (bfloat16 bits)


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


def rounding_generator(seed: int, step: int, index: int, device: torch.device) -> torch.Generator:
    """The generator of a table's rounding noise at `step`: seeded by (seed, step, the table's
    position `index`), so a resumed run and a data-parallel replica draw what the others do."""
    generator = torch.Generator(device=device)
    generator.manual_seed(((seed * 1_000_003 + step) * 1_000_003 + index) % 2**63)
    return generator


def bfloat16_bits_to_float(bits: torch.Tensor) -> torch.Tensor:
    """The float32 values of bfloat16 numbers stored as int16 bits (`round_to_bfloat16`)."""
    return bits.view(torch.bfloat16).float()


class CompactAdam(EagerOptimizer):
    """Adam; parameter groups with `state` "bfloat16" or "rowwise" hold `[rows, dim]` tables kept
    as the module docstring says ("float32", the default, is Adam's). `seed` seeds the rounding."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        seed: int = 0,
    ) -> None:
        if not lr > 0 or not eps >= 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"CompactAdam needs lr > 0, eps >= 0, betas in [0, 1) (got {lr}, {eps}, {betas})")  # fmt: skip
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "state": "float32"})
        self.seed = int(seed)
        for group in self.param_groups:
            if group["state"] not in STATES:
                raise ValueError(f"a group's state is one of {', '.join(STATES)} (got {group['state']!r})")  # fmt: skip
            if group["state"] != "float32":
                for p in group["params"]:
                    if p.dim() != 2:
                        raise ValueError(
                            f"a {group['state']} group holds [rows, dim] tables (got a parameter of shape {tuple(p.shape)})"
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
                    raise RuntimeError("CompactAdam takes dense gradients")
                state = self.state[p]
                if not state:
                    _init_state(state, p, group["state"])
                state["step"] += 1
                step = int(state["step"].item())
                if group["state"] == "float32":
                    _adam_update(p, state, group, step)
                else:
                    self._compact_update(p, state, group, step, index)
        return loss

    def _compact_update(self, p, state, group, step: int, index: int) -> None:
        beta1, beta2 = group["betas"]
        step_size = group["lr"] / (1 - beta1**step)
        root_correction = math.sqrt(1 - beta2**step)
        generator = rounding_generator(self.seed, step, index, p.device)
        rowwise, grad, first_bits = group["state"] == "rowwise", p.grad, state["exp_avg_bits"]
        rows = max(1, BLOCK_ELEMENTS // max(p.shape[1], 1))
        for start in range(0, p.shape[0], rows):
            block = slice(start, start + rows)
            g = grad[block]
            first = bfloat16_bits_to_float(first_bits[block]).lerp_(g, 1 - beta1)
            if rowwise:
                second = state["exp_avg_sq_row"][block]  # a view: updated in place
                second.mul_(beta2).add_(g.square().mean(dim=1), alpha=1 - beta2)
                denom = second.sqrt().div_(root_correction).add_(group["eps"]).unsqueeze(1)
            else:
                second = bfloat16_bits_to_float(state["exp_avg_sq_bits"][block])
                second.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                denom = second.sqrt().div_(root_correction).add_(group["eps"])
            p[block].addcdiv_(first, denom, value=-step_size)
            first_bits[block] = round_to_bfloat16(first, generator)
            if not rowwise:
                state["exp_avg_sq_bits"][block] = round_to_bfloat16(second, generator)

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's, then the bfloat16 moments' bits back to int16 (torch casts every state tensor
        of a float parameter to its dtype; int16 values survive float32 exactly). A group saved
        by `torch.optim.Adam` (checkpoints written before this was the float32 optimizer too)
        continues as a float32 group."""
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group.setdefault("state", "float32")
        for state in self.state.values():
            for key in _BITS_KEYS:
                if key in state:
                    state[key] = state[key].to(torch.int16)


def _init_state(state: dict, p: torch.Tensor, kind: str) -> None:
    state["step"] = torch.tensor(0.0)
    if kind == "float32":
        state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(p), torch.zeros_like(p)
        return
    state["exp_avg_bits"] = torch.zeros_like(p, dtype=torch.int16)
    if kind == "rowwise":
        state["exp_avg_sq_row"] = torch.zeros(p.shape[0], device=p.device)
    else:
        state["exp_avg_sq_bits"] = torch.zeros_like(p, dtype=torch.int16)


def _adam_update(p, state, group, step: int) -> None:
    """torch.optim.Adam's update (no weight decay, no amsgrad), its bits. The moments are updated
    in place; the denominator is made `BLOCK_ELEMENTS` at a time, so its temporary stays small
    where torch's one-tensor step makes two parameter-sized ones (305 MiB each for KGAT's node
    table at 10M triples + interactions: a sampled step's peak was this update's)."""
    beta1, beta2 = group["betas"]
    grad, exp_avg, exp_avg_sq = p.grad, state["exp_avg"], state["exp_avg_sq"]
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    root_correction, step_size = math.sqrt(1 - beta2**step), -group["lr"] / (1 - beta1**step)
    tensors = (p, exp_avg, exp_avg_sq)
    if not all(t.is_contiguous() for t in tensors):
        denom = exp_avg_sq.sqrt().div_(root_correction).add_(group["eps"])
        p.addcdiv_(exp_avg, denom, value=step_size)
        return
    weights, first, second = (t.view(-1) for t in tensors)
    for start in range(0, weights.numel(), BLOCK_ELEMENTS):
        block = slice(start, start + BLOCK_ELEMENTS)
        denom = second[block].sqrt().div_(root_correction).add_(group["eps"])
        weights[block].addcdiv_(first[block], denom, value=step_size)


def moment_bytes(parameter: torch.Tensor, state: str) -> int:
    """Bytes of the moments kept for `parameter` under `state` (one of `STATES`)."""
    if state == "rowwise":
        return parameter.numel() * 2 + parameter.shape[0] * 4
    if state == "bfloat16":
        return 2 * parameter.numel() * 2
    return 2 * parameter.numel() * parameter.element_size()


def table_ids(model: torch.nn.Module) -> set[int]:
    """`id()`s of the model's `embedding_tables` parameters."""
    return {id(getattr(model, name)) for name in getattr(model, "embedding_tables", ())}


def table_groups(
    model: torch.nn.Module, parameters: Iterable[torch.nn.Parameter], state: str
) -> list[dict]:
    """`parameters` as CompactAdam's groups: the model's `embedding_tables` kept as `state`, the
    rest as Adam's (a group left empty is dropped)."""
    tables, parameters = table_ids(model), list(parameters)
    groups = [
        {"params": [p for p in parameters if id(p) in tables], "state": state},
        {"params": [p for p in parameters if id(p) not in tables], "state": "float32"},
    ]
    return [g for g in groups if g["params"]]
