"""CompactAdam (`--adam-state`): Adam's bits for the small parameters; for the tables bfloat16
moments rounded without bias (`bfloat16`: both; `rowwise`: the first, the second per row), half or
a quarter of Adam's state, an exact resume from its state dict; the run's optimizer and the
setting's errors."""

from __future__ import annotations

import copy

import pytest
import torch

import tinykg_train.compact_adam as compact_adam
from tinykg_train.compact_adam import (
    CompactAdam,
    bfloat16_bits_to_float,
    moment_bytes,
    round_to_bfloat16,
    table_groups,
)
from tinykg_train.config import TrainConfig
from tinykg_train.errors import ConfigError
from tinykg_train.memory_breakdown import optimizer_state_bytes
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
    train(CompactAdam([twin], lr=0.01), twin, grads)
    assert torch.equal(weight, twin)


def test_the_float32_update_makes_its_denominator_a_block_at_a_time(monkeypatch):
    """Torch's bits across several blocks (the last one short), and the step's temporaries are a
    block's: a parameter-sized denominator would peak at the table's bytes."""
    from tinykg_train.memory import allocation_peak

    monkeypatch.setattr(compact_adam, "BLOCK_ELEMENTS", 64)
    weight = torch.nn.Parameter(torch.randn(41, 8))  # 328 elements: 5 blocks and 8 left over
    twin = torch.nn.Parameter(weight.detach().clone())
    grads = gradients((41, 8), 5)
    train(torch.optim.Adam([weight], lr=0.01), weight, grads)
    train(CompactAdam([twin], lr=0.01), twin, grads)
    assert torch.equal(weight, twin)

    monkeypatch.setattr(compact_adam, "BLOCK_ELEMENTS", 1024)
    table = torch.nn.Parameter(torch.randn(4096, 16))  # 256 KiB
    optimizer = CompactAdam([table], lr=0.01)
    table.grad = torch.randn_like(table)
    optimizer.step()  # the moments are made here
    with allocation_peak(torch.device("cpu")) as window:
        optimizer.step()
    assert window.peak_bytes <= 4 * 1024 * 4, window.peak_bytes  # a few blocks' floats at most


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


def reference_adam(start: torch.Tensor, grads, lr: float, state: str) -> torch.Tensor:
    """The reference in float64, no rounding: Adam (`bfloat16`'s moments unrounded) or FBGEMM's
    partial row-wise Adam (`rowwise`: second moment per row mean)."""
    weight = start.double().clone()
    first = torch.zeros_like(weight)
    second = torch.zeros(weight.shape[0], 1, dtype=torch.float64)
    if state == "bfloat16":
        second = torch.zeros_like(weight)
    for step, grad in enumerate(grads, 1):
        grad = grad.double()
        first = 0.9 * first + 0.1 * grad
        squares = grad.square().mean(dim=1, keepdim=True) if state == "rowwise" else grad.square()
        second = 0.999 * second + 0.001 * squares
        root = (second / (1 - 0.999**step)).sqrt() + 1e-8
        weight -= lr / (1 - 0.9**step) * first / root
    return weight


@pytest.mark.parametrize("state", ["bfloat16", "rowwise"])
@pytest.mark.parametrize("block_elements", [1 << 20, 24], ids=["one-block", "blocks-of-3-rows"])
def test_tables_follow_their_reference(monkeypatch, block_elements, state):
    monkeypatch.setattr(compact_adam, "BLOCK_ELEMENTS", block_elements)
    table = torch.nn.Parameter(torch.randn(30, 8))
    start = table.detach().clone()
    grads = gradients((30, 8), 40)
    optimizer = CompactAdam([{"params": [table], "state": state}], lr=0.01)
    train(optimizer, table, grads)
    expected = reference_adam(start, grads, 0.01, state)
    # each step moves an element by about lr; bfloat16 moments (2**-9 relative, rounded without
    # bias) leave the weights within a small share of the 40 steps' path
    bound = 0.005 * 0.01 * len(grads)
    assert (table.double() - expected).abs().max() < bound
    # the other form lands far outside that bound: the test tells them apart
    other = "rowwise" if state == "bfloat16" else "bfloat16"
    assert (reference_adam(start, grads, 0.01, other) - expected).abs().max() > 10 * bound
    kept = {k: (v.dtype, tuple(v.shape)) for k, v in optimizer.state[table].items() if k != "step"}
    second = {"rowwise": ("exp_avg_sq_row", (torch.float32, (30,))),
              "bfloat16": ("exp_avg_sq_bits", (torch.int16, (30, 8)))}[state]  # fmt: skip
    assert kept == {"exp_avg_bits": (torch.int16, (30, 8)), second[0]: second[1]}


@pytest.mark.parametrize(("state", "share"), [("bfloat16", 0.5), ("rowwise", 0.2579)])
def test_table_state_is_half_or_a_quarter_of_adams(state, share):
    table = torch.nn.Parameter(torch.randn(1000, 64))
    plain = torch.optim.Adam([table], lr=0.01)
    compact = CompactAdam([{"params": [table], "state": state}], lr=0.01)
    for optimizer in (plain, compact):
        table.grad = torch.randn(1000, 64)
        optimizer.step()
    adam_bytes = sum(t.numel() * t.element_size() for t in plain.state[table].values())
    moments = moment_bytes(table, state)
    assert optimizer_state_bytes(compact) == moments + 4  # and the step count (the breakdown)
    assert moments / moment_bytes(table, "float32") == pytest.approx(share, abs=1e-4)
    assert moment_bytes(table, "float32") + 4 == adam_bytes


@pytest.mark.parametrize("state", ["bfloat16", "rowwise"])
def test_a_loaded_state_dict_continues_with_the_uninterrupted_bits(state):
    grads = gradients((20, 8), 12, seed=4)
    start = torch.randn(20, 8)

    def fresh():
        table = torch.nn.Parameter(start.clone())
        return table, CompactAdam([{"params": [table], "state": state}], lr=0.01, seed=7)

    table, optimizer = fresh()
    train(optimizer, table, grads)

    first_half, optimizer_half = fresh()
    train(optimizer_half, first_half, grads[:6])
    saved = copy.deepcopy((first_half.detach().clone(), optimizer_half.state_dict()))
    resumed, optimizer_resumed = fresh()
    with torch.no_grad():
        resumed.copy_(saved[0])
    optimizer_resumed.load_state_dict(saved[1])
    kept = optimizer_resumed.state[resumed]
    assert {t.dtype for k, t in kept.items() if k.endswith("_bits")} == {torch.int16}
    train(optimizer_resumed, resumed, grads[6:])
    assert torch.equal(resumed, table)


def test_other_seeds_round_differently():
    grads = gradients((20, 8), 5)
    tables = []
    for seed in (0, 1):
        table = torch.nn.Parameter(torch.zeros(20, 8))
        train(
            CompactAdam([{"params": [table], "state": "rowwise"}], lr=0.01, seed=seed), table, grads
        )
        tables.append(table)
    assert not torch.equal(*tables)


def test_a_compact_group_takes_tables_only_and_known_forms():
    with pytest.raises(ValueError, match=r"a bfloat16 group holds \[rows, dim\] tables"):
        CompactAdam([{"params": [torch.nn.Parameter(torch.zeros(4))], "state": "bfloat16"}])
    with pytest.raises(ValueError, match="one of float32, bfloat16, rowwise"):
        CompactAdam([{"params": [torch.nn.Parameter(torch.zeros(4, 2))], "state": "int8"}])


def test_the_models_tables_are_the_compact_group(tiny_dataset_dir, tmp_path):
    config = TrainConfig.for_model(
        "kgat", data=str(tiny_dataset_dir), out=str(tmp_path / "run"), embed_dim=8, n_layers=2,
        device="cpu", adam_state="bfloat16",
    )  # fmt: skip
    session = open_session(config, torch.device("cpu"))
    optimizer, model = session.optimizer, session.model
    assert isinstance(optimizer, CompactAdam)
    compact = [g["params"] for g in optimizer.param_groups if g["state"] == "bfloat16"]
    assert compact == [[model.node_embedding]]
    others = [p for g in optimizer.param_groups if g["state"] == "float32" for p in g["params"]]
    assert len(others) == len(list(model.parameters())) - 1
    assert table_groups(model, [], "rowwise") == []
    plain = open_session(
        TrainConfig.for_model("kgat", data=str(tiny_dataset_dir), device="cpu", embed_dim=8),
        torch.device("cpu"),
    )
    assert type(plain.optimizer) is CompactAdam  # Adam's bits at float32 (tests above)
    assert [g["state"] for g in plain.optimizer.param_groups] == ["float32"]


def test_a_checkpointed_torch_adam_continues_with_torch_adams_bits():
    """A run checkpointed when the float32 optimizer was `torch.optim.Adam` resumes into
    CompactAdam where torch's Adam would have gone on."""
    weight = torch.nn.Parameter(torch.randn(30, 8))
    twin = torch.nn.Parameter(weight.detach().clone())
    grads = gradients((30, 8), 12)
    reference = torch.optim.Adam([weight], lr=0.01)
    train(reference, weight, grads[:6])
    twin.data.copy_(weight.detach())
    resumed = CompactAdam([twin], lr=0.01)
    resumed.load_state_dict(copy.deepcopy(reference.state_dict()))
    train(reference, weight, grads[6:])
    train(resumed, twin, grads[6:])
    assert torch.equal(weight, twin)


@pytest.mark.parametrize("flag", ["sparse_adam", "offload_embeddings"])
def test_a_rowwise_state_with_row_tables_is_a_one_line_error_and_bfloat16_is_taken(flag):
    with pytest.raises(ConfigError, match="--adam-state rowwise keeps a second moment per row"):
        TrainConfig(model="kgat", sampler="neighbor", adam_state="rowwise", **{flag: True})
    config = TrainConfig(model="kgat", sampler="neighbor", adam_state="bfloat16", **{flag: True})
    assert config.row_wise_tables and config.adam_state == "bfloat16"


def test_adam_state_is_one_of_the_forms():
    assert TrainConfig(adam_state="bfloat16").adam_state == "bfloat16"
    with pytest.raises(ConfigError, match="'adam_state' must be one of float32, bfloat16, rowwise"):
        TrainConfig(adam_state="int8")
