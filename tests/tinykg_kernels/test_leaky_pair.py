"""`leaky_relu_pair`: torch's LeakyReLU sum, masks and gradients bit for bit on every backend (torch,
cpu-native, cpu-inductor), the plane layout as documented, one inductor graph for every size, what
ran recorded, clear errors."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from tinykg_kernels import backend_usage, cpu_ops, dispatch
from tinykg_kernels.leaky_pair import (
    leaky_relu_pair,
    leaky_relu_pair_backward,
    leaky_relu_pair_backward_rows,
)
from tinykg_kernels.planes import mask_bytes, pack_planes, unpack_planes

SLOPE = 0.2


def normal(shape, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def torch_pair(a, b, slope=SLOPE):
    return F.leaky_relu(a, slope) + F.leaky_relu(b, slope)


def torch_backward(grad, x, slope=SLOPE):
    return torch.ops.aten.leaky_relu_backward(grad, x, slope, False)


# CPU loops: float32, 4,096+ elements, a multiple of 8; everything else takes the torch ops
@pytest.mark.parametrize(
    "shape", [(3,), (5, 7), (64, 64), (1000, 16), (997, 24), (4099, 5), (2, 3, 4096)]
)
def test_sum_masks_and_gradients_are_torch_s_bit_for_bit(shape, backend: str):
    a, b, grad = normal(shape, 1), normal(shape, 2), normal(shape, 3)
    out, mask_a, mask_b = leaky_relu_pair(a, b, SLOPE, backend=backend)
    assert out.shape == a.shape and torch.equal(out, torch_pair(a, b))
    assert mask_a.dtype == torch.uint8 and mask_a.numel() == mask_bytes(a.numel())
    assert torch.equal(unpack_planes(mask_a, shape), a > 0)
    assert torch.equal(unpack_planes(mask_b, shape), b > 0)
    grad_a, grad_b = leaky_relu_pair_backward(grad, mask_a, mask_b, SLOPE, backend=backend)
    assert torch.equal(grad_a, torch_backward(grad, a))
    assert torch.equal(grad_b, torch_backward(grad, b))


def test_zeros_negatives_and_nan_are_not_positive(backend: str):
    """The mask is x > 0: 0, -0 and NaN give the slope's gradient, as torch's LeakyReLU backward."""
    a = torch.tensor([0.0, -0.0, float("nan"), 1e-38, -1e-38, 3.0, -3.0, float("inf")]).repeat(600)
    b = a.flip(0)
    grad = torch.ones_like(a)
    out, mask_a, mask_b = leaky_relu_pair(a, b, SLOPE, backend=backend)
    torch.testing.assert_close(out, torch_pair(a, b), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(unpack_planes(mask_a, a.shape), a > 0)
    grad_a, grad_b = leaky_relu_pair_backward(grad, mask_a, mask_b, SLOPE, backend=backend)
    assert torch.equal(grad_a, torch_backward(grad, a))
    assert torch.equal(grad_b, torch_backward(grad, b))


def test_the_cpu_loops_masks_are_in_the_plane_layout(cpu_loops):
    mask = torch.zeros(20, dtype=torch.bool)
    mask[[0, 4, 8, 19]] = True
    a = torch.where(mask, 1.0, -1.0).repeat(1024)  # 20,480 elements: the CPU loops
    before = backend_usage()
    _, packed, _ = leaky_relu_pair(a, -a, backend=cpu_loops)
    assert backend_usage(since=before) == {"leaky_relu_pair": {cpu_loops: 1}}
    assert torch.equal(packed, pack_planes(a > 0))


def test_any_size_runs_one_inductor_graph_per_direction():
    leaky_relu_pair(normal((512, 16), 0), normal((512, 16), 1), 0.3, backend="cpu-inductor")
    compiles = cpu_ops._compiled.cache_info().misses
    for rows in (513, 700, 4096, 9000):
        a, b, grad = normal((rows, 16), rows), normal((rows, 16), rows + 1), normal((rows, 16), 2)
        out, mask_a, mask_b = leaky_relu_pair(a, b, 0.3, backend="cpu-inductor")
        assert torch.equal(out, torch_pair(a, b, 0.3))
        grad_a, _ = leaky_relu_pair_backward(grad, mask_a, mask_b, 0.3, backend="cpu-inductor")
        assert torch.equal(grad_a, torch_backward(grad, a, 0.3))
    assert cpu_ops._compiled.cache_info().misses - compiles <= 1  # the backward graph


def test_non_contiguous_and_other_dtypes_take_the_same_values(cpu_loops):
    a, b = normal((64, 96), 5).t(), normal((64, 96), 6).t()
    out, mask_a, _ = leaky_relu_pair(a, b, SLOPE, backend=cpu_loops)
    assert torch.equal(out, torch_pair(a, b))
    assert torch.equal(unpack_planes(mask_a, a.shape), a > 0)
    a16, b16 = normal((64, 96), 7, torch.bfloat16), normal((64, 96), 8, torch.bfloat16)
    out16, _, _ = leaky_relu_pair(a16, b16, SLOPE)
    assert out16.dtype == torch.bfloat16 and torch.equal(out16, torch_pair(a16, b16))


def test_auto_runs_large_float32_cpu_tensors_in_the_cpu_loops_only(monkeypatch, cpu_loops):
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    small, big = normal((10, 10), 0), normal((dispatch.CPU_LOOPS_MIN_NUMEL,), 1)
    before = backend_usage()
    leaky_relu_pair(small, small)
    leaky_relu_pair(big, big)
    leaky_relu_pair(big.double(), big.double())
    assert backend_usage(since=before) == {"leaky_relu_pair": {cpu_loops: 1, "torch": 2}}


def test_a_failed_compile_warns_and_gives_the_same_values(no_compiler):
    a, b = normal((128, 64), 1), normal((128, 64), 2)
    before = backend_usage()
    with pytest.warns(RuntimeWarning, match="torch.compile failed"):
        out, mask_a, _ = leaky_relu_pair(a, b, SLOPE, backend="cpu-inductor")
    assert torch.equal(out, torch_pair(a, b))
    assert torch.equal(unpack_planes(mask_a, a.shape), a > 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(leaky_relu_pair(a, b, SLOPE)[0], out)  # auto: the torch ops now
    assert backend_usage(since=before) == {"leaky_relu_pair": {"torch": 2}}  # what really ran
    with pytest.raises(RuntimeError, match="backend 'cpu-inductor' cannot run here"):
        leaky_relu_pair(a, b, SLOPE, backend="cpu-inductor")


def test_bad_input_says_what_to_pass():
    with pytest.raises(ValueError, match=r"two float tensors of one shape"):
        leaky_relu_pair(torch.zeros(4, 3), torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"two float tensors"):
        leaky_relu_pair(torch.zeros(8, dtype=torch.int64), torch.zeros(8, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"mask_b must be the 2 uint8 bytes"):
        leaky_relu_pair_backward(
            torch.zeros(16), torch.zeros(2, dtype=torch.uint8), torch.zeros(3, dtype=torch.uint8)
        )


def test_a_block_of_rows_gets_the_whole_calls_gradients_bit_for_bit(backend: str):
    """The gradients of rows `a:b` from the whole tensor's masks, as the whole call gives them."""
    shape = (1001, 24)
    a, b, grad = normal(shape, 4), normal(shape, 5), normal(shape, 6)
    _, mask_a, mask_b = leaky_relu_pair(a, b, SLOPE, backend=backend)
    whole_a, whole_b = leaky_relu_pair_backward(grad, mask_a, mask_b, SLOPE, backend=backend)
    numel = a.numel()
    for start, stop in [(0, 1001), (0, 130), (130, 517), (517, 1001), (999, 1000)]:
        rows_a, rows_b = leaky_relu_pair_backward_rows(
            grad[start:stop], mask_a, mask_b, start * 24, numel, SLOPE
        )
        assert torch.equal(rows_a, whole_a[start:stop])
        assert torch.equal(rows_b, whole_b[start:stop])


def test_a_block_of_a_tensor_of_partial_planes_gets_the_whole_calls_gradients():
    """5,005 elements: the last plane is padded (k = 626 bytes); a block of 4,960 elements, which the
    native loops take, crosses every plane boundary and still reads each element's own bit."""
    shape = (1001, 5)
    a, b, grad = normal(shape, 7), normal(shape, 8), normal(shape, 9)
    _, mask_a, mask_b = leaky_relu_pair(a, b, SLOPE)
    whole_a, whole_b = leaky_relu_pair_backward(grad, mask_a, mask_b, SLOPE)
    for start, stop in [(8, 1000), (0, 1001), (1, 9)]:
        rows_a, rows_b = leaky_relu_pair_backward_rows(
            grad[start:stop], mask_a, mask_b, start * 5, a.numel(), SLOPE
        )
        assert torch.equal(rows_a, whole_a[start:stop])
        assert torch.equal(rows_b, whole_b[start:stop])


def test_a_block_outside_the_tensor_or_foreign_masks_are_refused():
    grad = torch.zeros(16)
    mask = torch.zeros(2, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"outside a tensor of 16"):
        leaky_relu_pair_backward_rows(grad, mask, mask, 8, 16)
    with pytest.raises(ValueError, match=r"mask_a must be the 4 uint8 bytes"):
        leaky_relu_pair_backward_rows(grad, mask, mask, 0, 32)


@pytest.mark.parametrize("want", [(True, False), (False, True)])
def test_one_gradient_asked_for_is_the_pair_s_and_the_other_is_none(want, backend: str):
    shape = (1000, 16)
    a, b, grad = normal(shape, 10), normal(shape, 11), normal(shape, 12)
    _, mask_a, mask_b = leaky_relu_pair(a, b, SLOPE, backend=backend)
    both = leaky_relu_pair_backward(grad, mask_a, mask_b, SLOPE, backend=backend)
    one = leaky_relu_pair_backward(grad, mask_a, mask_b, SLOPE, backend=backend, want=want)
    for got, expected, wanted in zip(one, both, want, strict=True):
        assert torch.equal(got, expected) if wanted else got is None
