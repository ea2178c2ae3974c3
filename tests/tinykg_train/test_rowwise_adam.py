"""RowwiseAdam (`--rowwise-adam`): Adam's bits for the small parameters; for the tables a bfloat16
first moment rounded without bias, a per-row second moment, a quarter of Adam's state, an exact
resume from its state dict; the run's optimizer and the flag's errors."""

from __future__ import annotations

import copy

import pytest
import torch

import tinykg_train.rowwise_adam as rowwise_adam
from tinykg_train.config import TrainConfig
from tinykg_train.errors import ConfigError
from tinykg_train.rowwise_adam import (
    RowwiseAdam,
    bfloat16_bits_to_float,
    round_to_bfloat16,
    table_groups,
)
from tinykg_train.session import open_session


def gradients(shape, steps: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    # rows of very different scales, as popular and rare entities get
    scales = torch.logspace(-4, 1, shape[0]).unsqueeze(1)
    return [torch.randn(shape, generator=generator) * scales for _ in range(steps)]


def train(optimizer: torch.optim.Optimizer, parameter, grads) -> None:
    for grad in grads:
        parameter.grad = grad.clone()
        optimizer.step()


def test_parameters_outside_rowwise_groups_get_torch_adams_bits():
    weight = torch.nn.Parameter(torch.randn(40, 8))
    twin = torch.nn.Parameter(weight.detach().clone())
    grads = gradients((40, 8), 25)
    train(torch.optim.Adam([weight], lr=0.01), weight, grads)
    train(RowwiseAdam([twin], lr=0.01), twin, grads)
    assert torch.equal(weight, twin)


def test_rounding_to_bfloat16_is_unbiased_between_the_two_neighbours():
    generator = torch.Generator().manual_seed(3)
    for value in (1.0 + 2**-9, -(3.0 + 2**-8 + 2**-10), 1e-30 * (1 + 2**-9)):
        x = torch.full((400_000,), value)
        rounded = bfloat16_bits_to_float(round_to_bfloat16(x, generator))
        below = x.to(torch.bfloat16).float()  # round to nearest: one of the two neighbours
        assert rounded.unique().numel() == 2 and below[0] in rounded.unique()
        step = (rounded.unique()[1] - rounded.unique()[0]).abs().item()
        # the mean's standard error is at most half a step over sqrt(n): 6 of them is far off
        assert abs(rounded.double().mean().item() - value) < 6 * 0.5 * step / 400_000**0.5
        # round to nearest (what a plain .to(bfloat16) would store) misses by a quarter step
        assert abs(below.double().mean().item() - value) > 0.2 * step


def test_rounding_keeps_exact_values_infinities_and_nan():
    generator = torch.Generator().manual_seed(0)
    x = torch.tensor([0.0, -0.0, 1.0, -2.5, float("inf"), float("-inf"), float("nan")])
    rounded = bfloat16_bits_to_float(round_to_bfloat16(x.repeat(1000), generator)).view(1000, -1)
    assert torch.equal(rounded[:, :6], x[:6].expand(1000, 6))
    assert rounded[:, 6].isnan().all()


def partial_rowwise_adam(start: torch.Tensor, grads, lr: float) -> torch.Tensor:
    """The reference in float64: FBGEMM's partial row-wise Adam (moment per element, second moment
    per row mean), no rounding."""
    weight = start.double().clone()
    first = torch.zeros_like(weight)
    second = torch.zeros(weight.shape[0], dtype=torch.float64)
    for step, grad in enumerate(grads, 1):
        grad = grad.double()
        first = 0.9 * first + 0.1 * grad
        second = 0.999 * second + 0.001 * grad.square().mean(dim=1)
        root = (second / (1 - 0.999**step)).sqrt() + 1e-8
        weight -= lr / (1 - 0.9**step) * first / root.unsqueeze(1)
    return weight


@pytest.mark.parametrize("block_elements", [1 << 20, 24], ids=["one-block", "blocks-of-3-rows"])
def test_tables_follow_partial_rowwise_adam(monkeypatch, block_elements):
    monkeypatch.setattr(rowwise_adam, "BLOCK_ELEMENTS", block_elements)
    table = torch.nn.Parameter(torch.randn(30, 8))
    start = table.detach().clone()
    grads = gradients((30, 8), 40)
    optimizer = RowwiseAdam([{"params": [table], "rowwise": True}], lr=0.01)
    train(optimizer, table, grads)
    expected = partial_rowwise_adam(start, grads, 0.01)
    # each step moves an element by about lr; bfloat16 first moments (2**-9 relative, rounded
    # without bias) leave the weights within a small share of the 40 steps' path
    bound = 0.005 * 0.01 * len(grads)
    assert (table.double() - expected).abs().max() < bound
    # per-element second moments (plain Adam) land far outside that bound
    adam_table = torch.nn.Parameter(start.clone())
    train(torch.optim.Adam([adam_table], lr=0.01), adam_table, grads)
    assert (adam_table.double() - expected).abs().max() > 10 * bound
    state = optimizer.state[table]
    assert state["exp_avg_bits"].dtype == torch.int16 and state["exp_avg_sq_row"].shape == (30,)


def test_table_state_is_a_quarter_of_adams():
    table = torch.nn.Parameter(torch.randn(1000, 64))
    plain, compact = (
        torch.optim.Adam([table], lr=0.01),
        RowwiseAdam([{"params": [table], "rowwise": True}], lr=0.01),
    )
    for optimizer in (plain, compact):
        table.grad = torch.randn(1000, 64)
        optimizer.step()
    adam_bytes = sum(t.numel() * t.element_size() for t in plain.state[table].values())
    assert compact.state_bytes() == 1000 * 64 * 2 + 1000 * 4 + 4
    assert compact.state_bytes() / adam_bytes < 0.27


def test_a_loaded_state_dict_continues_with_the_uninterrupted_bits():
    grads = gradients((20, 8), 12, seed=4)
    start = torch.randn(20, 8)

    def fresh():
        table = torch.nn.Parameter(start.clone())
        return table, RowwiseAdam([{"params": [table], "rowwise": True}], lr=0.01, seed=7)

    table, optimizer = fresh()
    train(optimizer, table, grads)

    first_half, optimizer_half = fresh()
    train(optimizer_half, first_half, grads[:6])
    saved = copy.deepcopy((first_half.detach().clone(), optimizer_half.state_dict()))
    resumed, optimizer_resumed = fresh()
    with torch.no_grad():
        resumed.copy_(saved[0])
    optimizer_resumed.load_state_dict(saved[1])
    assert optimizer_resumed.state[resumed]["exp_avg_bits"].dtype == torch.int16
    train(optimizer_resumed, resumed, grads[6:])
    assert torch.equal(resumed, table)


def test_other_seeds_round_differently():
    grads = gradients((20, 8), 5)
    tables = []
    for seed in (0, 1):
        table = torch.nn.Parameter(torch.zeros(20, 8))
        train(RowwiseAdam([{"params": [table], "rowwise": True}], lr=0.01, seed=seed), table, grads)
        tables.append(table)
    assert not torch.equal(*tables)


def test_a_rowwise_group_takes_tables_only():
    with pytest.raises(ValueError, match=r"\[rows, dim\] tables"):
        RowwiseAdam([{"params": [torch.nn.Parameter(torch.zeros(4))], "rowwise": True}])


def test_the_models_tables_are_the_rowwise_group(tiny_dataset_dir, tmp_path):
    config = TrainConfig.for_model(
        "kgat", data=str(tiny_dataset_dir), out=str(tmp_path / "run"), embed_dim=8, n_layers=2,
        device="cpu", rowwise_adam=True,
    )  # fmt: skip
    session = open_session(config, torch.device("cpu"))
    optimizer, model = session.optimizer, session.model
    assert isinstance(optimizer, RowwiseAdam)
    rowwise = [g["params"] for g in optimizer.param_groups if g["rowwise"]]
    assert rowwise == [[model.node_embedding]]
    others = [p for g in optimizer.param_groups if not g["rowwise"] for p in g["params"]]
    assert len(others) == len(list(model.parameters())) - 1
    assert table_groups(model, []) == []
    plain = open_session(
        TrainConfig.for_model("kgat", data=str(tiny_dataset_dir), device="cpu", embed_dim=8),
        torch.device("cpu"),
    )
    assert type(plain.optimizer) is torch.optim.Adam


@pytest.mark.parametrize("flag", ["sparse_adam", "offload_embeddings"])
def test_rowwise_adam_with_row_tables_is_a_one_line_error(flag):
    with pytest.raises(ConfigError, match="--rowwise-adam compacts the dense Adam's tables"):
        TrainConfig(model="kgat", sampler="neighbor", rowwise_adam=True, **{flag: True})


def test_rowwise_adam_reads_booleans_only():
    assert TrainConfig(rowwise_adam=True).rowwise_adam is True
    with pytest.raises(ConfigError, match="rowwise_adam"):
        TrainConfig(rowwise_adam="sometimes")
