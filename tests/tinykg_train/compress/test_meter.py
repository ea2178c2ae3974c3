import weakref

import pytest
import torch
from torch import nn

from tinykg_train.compress import ActivationMeter, CompressionConfig, compress_saved_tensors
from tinykg_train.compress import modules as cm

BATCH, IN, HIDDEN, OUT = 32, 80, 64, 16  # rows of >= 64: one scale per row
INT2 = CompressionConfig(bits=2)


def int2_row(width: int) -> int:
    """Bytes of one row at 2 bits: packed codes plus a 16-bit scale and zero point."""
    return (width * 2 + 7) // 8 + 4


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def batch() -> torch.Tensor:
    return torch.randn(BATCH, IN)


def test_fp32_hand_count_and_split():
    """Linear saves its input (the weights are parameters), ReLU its output, which is also the second
    Linear's input: stored once, attributed to the ReLU that saved it first."""
    model = mlp()
    with ActivationMeter(model) as meter:
        out = model(batch())
    assert meter.by_module() == {"0": BATCH * IN * 4, "1": BATCH * HIDDEN * 4}
    assert meter.total_bytes == BATCH * (IN + HIDDEN) * 4
    assert out.requires_grad


def test_int2_hand_count_through_the_hooks():
    model = mlp()
    with compress_saved_tensors(INT2), ActivationMeter(model) as meter:
        out = model(batch())
    relu_output = BATCH * int2_row(HIDDEN) + BATCH * HIDDEN // 8  # codes + exact sign mask
    assert meter.by_module() == {"0": BATCH * int2_row(IN), "1": relu_output}
    assert out.requires_grad


def test_int2_hand_count_through_the_ops():
    model = nn.Sequential(
        cm.Linear(IN, HIDDEN, config=INT2),
        cm.ReLU(config=INT2),
        cm.Linear(HIDDEN, OUT, config=INT2),
    )
    with ActivationMeter(model) as meter:
        out = model(batch())
    assert meter.by_module() == {
        "0": BATCH * int2_row(IN),  # the compressed input
        "1": BATCH * HIDDEN // 8,  # the 1-bit mask
        "2": BATCH * int2_row(HIDDEN),  # its own compressed input
    }
    assert out.requires_grad


class TwoTowers(nn.Module):
    """A model whose loss is a method (not `__call__`), with a buffer and a shared input."""

    def __init__(self) -> None:
        super().__init__()
        self.left, self.right = nn.Linear(IN, 8), nn.Linear(IN, 8)
        self.register_buffer("offset", torch.randn(BATCH, IN))

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        shifted = x * self.offset  # saves only the buffer: excluded
        return (self.left(shifted) * self.right(shifted)).sum()  # the product: outside submodules


def test_method_calls_buffers_and_shared_inputs():
    model = TwoTowers()
    x = batch().requires_grad_()
    with ActivationMeter(model) as meter:
        loss = model.loss(x)
    assert meter.by_module() == {
        "left": BATCH * IN * 4,  # `shifted`: saved by both towers, counted once, where first saved
        "": 2 * BATCH * 8 * 4,  # the two tower outputs the product saves
    }
    assert loss.requires_grad


@pytest.mark.parametrize("bits", [32, 2])
def test_a_saved_output_does_not_keep_its_graph_alive(bits):
    """ReLU saves its own output: stored as the tensor itself, it would hold its own grad_fn (a
    reference cycle that leaks the graph); the stack stores a detached alias."""
    x = torch.randn(8, requires_grad=True)  # under min_numel: stored as it is even at 2 bits
    with compress_saved_tensors(CompressionConfig(bits=bits)), ActivationMeter():
        out = torch.relu(x * 2)
    alive = weakref.ref(out)
    del out
    assert alive() is None


def test_only_what_is_still_held_when_the_block_ends_is_counted():
    model = mlp()
    with ActivationMeter(model) as meter:
        model(batch())  # the graph is dropped at once: nothing is held for backward
    assert meter.total_bytes == 0
    with ActivationMeter(model) as meter, torch.no_grad():
        out = model(batch())
    assert meter.total_bytes == 0 and not out.requires_grad


def test_hooks_are_removed_even_when_the_forward_fails():
    model = mlp()
    with pytest.raises(RuntimeError), ActivationMeter(model):
        model(torch.randn(BATCH, IN + 1))
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())
    with ActivationMeter(model) as meter:  # and it can be used again
        out = model(batch())
    assert meter.total_bytes == BATCH * (IN + HIDDEN) * 4 and out.requires_grad


def test_table_lists_modules_largest_first_with_a_total():
    model = mlp()
    with ActivationMeter(model) as meter:
        out = model(batch())
    lines = meter.table().splitlines()
    assert lines[0].split() == ["module", "bytes", "KiB", "share"]
    assert [line.split()[0] for line in lines[1:]] == ["0", "1", "total"]  # 80 > 64 columns
    assert f"{BATCH * (IN + HIDDEN) * 4:,}" in lines[-1]
    assert out.requires_grad
