"""The plane-mask Triton kernels (`triton_planes`) against the torch ops, bit for bit: LeakyReLU
pair, its backward whole and by blocks of elements, dropout and its backward; the same mask bytes as
`pack_planes`; float32 only. On CPU they run under TRITON_INTERPRET=1 (set by tests/conftest.py),
with small blocks so that a call spans many programs and partial blocks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from tinykg_kernels import backend_usage, dispatch  # noqa: E402
from tinykg_kernels.dropout import apply_dropout_noise, dropout_noise_backward  # noqa: E402
from tinykg_kernels.leaky_pair import (  # noqa: E402
    leaky_relu_pair,
    leaky_relu_pair_backward,
    leaky_relu_pair_backward_rows,
)
from tinykg_kernels.planes import pack_planes  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and not dispatch.triton_ops().INTERPRETED:
    pytest.skip(
        "CPU tensors need Triton's interpreter (TRITON_INTERPRET=1)", allow_module_level=True
    )

# the interpreter's numpy warns on inf * 0 (dropout of an inf), which the tests mean to make
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

SLOPE = 0.2
SHAPES = [(3,), (5, 7), (64, 64), (997, 24), (4099, 5)]


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 64 bytes (or elements): several programs per call, the last one partial."""
    monkeypatch.setattr(dispatch.triton_planes(), "BLOCK", 64)


def normal(shape, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.shape == y.shape and torch.equal(x.view(torch.int32), y.view(torch.int32))


@pytest.mark.parametrize("shape", SHAPES)
def test_leaky_pair_sum_masks_and_gradients_are_torch_s(shape):
    a, b, grad = normal(shape, 1), normal(shape, 2), normal(shape, 3)
    a.view(-1)[:3] = torch.tensor([0.0, -0.0, float("nan")])[: a.numel()]
    before = backend_usage()
    out, mask_a, mask_b = leaky_relu_pair(a, b, SLOPE, backend="triton")
    assert same_bits(out, F.leaky_relu(a, SLOPE) + F.leaky_relu(b, SLOPE))
    assert torch.equal(mask_a, pack_planes(a > 0)) and torch.equal(mask_b, pack_planes(b > 0))
    grad_a, grad_b = leaky_relu_pair_backward(grad, mask_a, mask_b, SLOPE, backend="triton")
    assert same_bits(grad_a, torch.ops.aten.leaky_relu_backward(grad, a, SLOPE, False))
    assert same_bits(grad_b, torch.ops.aten.leaky_relu_backward(grad, b, SLOPE, False))
    assert backend_usage(before)["leaky_relu_pair"] == {"triton": 1}


def test_leaky_pair_backward_of_blocks_of_elements_is_the_whole_call_s():
    """Blocks of rows starting anywhere (across plane boundaries, in a padded last plane)."""
    shape = (1001, 5)  # 5,005 elements: k = 626 bytes, the last plane padded
    a, b, grad = normal(shape, 4), normal(shape, 5), normal(shape, 6)
    _, mask_a, mask_b = leaky_relu_pair(a, b, SLOPE, backend="triton")
    whole_a, whole_b = leaky_relu_pair_backward(grad, mask_a, mask_b, SLOPE, backend="triton")
    before = backend_usage()
    for start, stop in [(0, 1001), (8, 1000), (1, 9), (999, 1001)]:
        rows_a, rows_b = leaky_relu_pair_backward_rows(
            grad[start:stop], mask_a, mask_b, start * 5, a.numel(), SLOPE, backend="triton"
        )
        assert same_bits(rows_a, whole_a[start:stop]) and same_bits(rows_b, whole_b[start:stop])
    assert backend_usage(before)["leaky_relu_pair_backward_rows"] == {"triton": 4}


def test_a_gradient_left_out_is_not_computed():
    a, b, grad = normal((300,), 7), normal((300,), 8), normal((300,), 9)
    _, mask_a, mask_b = leaky_relu_pair(a, b, SLOPE, backend="triton")
    both = leaky_relu_pair_backward(grad, mask_a, mask_b, SLOPE, backend="triton")
    for want in [(True, False), (False, True)]:
        one = leaky_relu_pair_backward(grad, mask_a, mask_b, SLOPE, backend="triton", want=want)
        for got, expected, wanted in zip(one, both, want, strict=True):
            assert same_bits(got, expected) if wanted else got is None


@pytest.mark.parametrize("scale", [1.0, 1 / 0.7])
@pytest.mark.parametrize("shape", SHAPES)
def test_dropout_products_mask_and_gradient_are_torch_s(shape, scale):
    x, grad = normal(shape, 10), normal(shape, 11)
    x.view(-1)[:2] = torch.tensor([float("inf"), -1.0])[: x.numel()]
    draws = torch.empty(shape).bernoulli_(0.7, generator=torch.Generator().manual_seed(12))
    draws = draws.to(DEVICE)
    draws.view(-1)[:2] = 0  # dropped: inf * 0 is NaN, -1 * 0 is -0
    noise = draws * scale if scale != 1 else draws
    out, kept = apply_dropout_noise(x, draws, backend="triton", scale=scale)
    assert same_bits(out, x * noise)
    assert torch.equal(kept, pack_planes(noise != 0))
    back = dropout_noise_backward(grad, kept, scale, backend="triton")
    kept_noise = (noise != 0).to(torch.float32) * scale
    assert same_bits(back, grad * kept_noise)
    over_draws, kept_again = apply_dropout_noise(x, draws, backend="triton", scale=scale, out=draws)
    assert over_draws.data_ptr() == draws.data_ptr() and same_bits(over_draws, out)
    assert torch.equal(kept_again, kept)


def test_other_dtypes_take_the_torch_ops():
    a = normal((64, 8), 13).to(torch.float64)
    before = backend_usage()
    out, mask_a, _ = leaky_relu_pair(a, -a, SLOPE, backend="triton")
    assert torch.equal(out, F.leaky_relu(a, SLOPE) + F.leaky_relu(-a, SLOPE))
    assert torch.equal(mask_a, pack_planes(a > 0))
    assert backend_usage(before)["leaky_relu_pair"] == {"torch": 1}


def test_auto_takes_the_kernels_where_dispatch_picks_triton_for_float32_only(monkeypatch):
    """On a GPU (`select_backend` -> triton) float32 calls run the kernels, other dtypes the torch
    ops; CPU tensors under `auto` never do, interpreter or not."""
    from tinykg_kernels import planes

    x = torch.zeros(64, 8)
    assert planes.path(x, "auto") != "triton"
    monkeypatch.setattr(dispatch, "select_backend", lambda *args: "triton")
    assert planes.path(x, None) == "triton"
    assert planes.path(x.double(), None) == "torch"
