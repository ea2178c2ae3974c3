"""The CPU backends' codec (cpu-native and cpu-inductor loops) equals the reference codec bit for bit
given the same counter noise, is unbiased, works inside autograd's saved-tensor hooks, and falls back
to the eager path (with one warning) when torch.compile fails."""

from __future__ import annotations

import warnings

import pytest
import torch

from tinykg_kernels import backend_usage, cpu_ops, dequantize, dispatch, native, quantize, reference
from tinykg_kernels.counter_noise import counter_noise, seed_keys
from tinykg_kernels.packing import GroupLayout

SEED = 2**62 + 4321


def reference_parts(x: torch.Tensor, layout: GroupLayout, scheme, param_dtype, seed):
    noise = counter_noise(seed_keys(seed), layout.numel) if seed is not None else None
    return reference.quantize(x.reshape(-1), layout, scheme, param_dtype, noise)


def assert_same_parts(got, expected) -> None:
    for part, want in zip(got, expected, strict=True):
        assert part.dtype == want.dtype and part.shape == want.shape
        assert torch.equal(part.view(torch.uint8), want.view(torch.uint8))  # NaN bits included


def awkward_input(shape, dtype) -> torch.Tensor:
    """Gaussian rows plus the cases that need care: a constant row, a row holding NaN, a huge row."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)) * 2.5 + 0.75
    x[1] = 0.3
    x[2, 3] = float("nan")
    x[3] *= 1e4
    return x.to(dtype)


CASES = [  # bits, scheme, input dtype, parameter dtype, group_size, shape
    (2, "uniform", torch.float32, torch.bfloat16, None, (257, 64)),
    (1, "uniform", torch.float32, torch.bfloat16, None, (100, 16)),
    (4, "uniform", torch.float16, torch.float16, None, (64, 32)),
    (8, "uniform", torch.float32, torch.float32, None, (33, 24)),
    (2, "normal", torch.float32, torch.bfloat16, None, (130, 64)),
    (2, "uniform", torch.bfloat16, torch.bfloat16, 128, (64, 40)),
    (2, "uniform", torch.float64, torch.float32, None, (40, 8)),
    (2, "uniform", torch.float32, torch.bfloat16, None, (20, 10)),  # 10 % 4 != 0: the eager path
    (4, "uniform", torch.float32, torch.bfloat16, 100, (7, 30)),  # a short last group beside
    (4, "uniform", torch.float32, torch.bfloat16, 6, (5, 12)),  # 6 % 4 != 0: int16 words
    (2, "uniform", torch.float32, torch.bfloat16, 64, (4, 10)),  # one short group: eager
    # the native loops' widths: 16-lane parts and a shorter last part of a group
    (8, "uniform", torch.float32, torch.bfloat16, None, (33, 24)),
    (4, "uniform", torch.float32, torch.bfloat16, None, (50, 176)),
    (2, "normal", torch.float32, torch.bfloat16, None, (40, 40)),
    (1, "uniform", torch.float32, torch.bfloat16, None, (30, 24)),
    # vectors of the CPU's width (8 lanes with AVX2) and a last part shorter than one
    (4, "uniform", torch.float32, torch.bfloat16, None, (9, 12)),
    (2, "uniform", torch.float32, torch.bfloat16, None, (6, 36)),
    (2, "normal", torch.float32, torch.bfloat16, None, (11, 20)),
]


@pytest.mark.parametrize(("bits", "scheme", "dtype", "param_dtype", "group_size", "shape"), CASES)
@pytest.mark.parametrize("seed", [SEED, None])
def test_equals_the_reference_with_counter_noise(
    bits, scheme, dtype, param_dtype, group_size, shape, seed, cpu_loops
):
    x = awkward_input(shape, dtype)
    layout = GroupLayout.for_shape(shape, group_size, bits)
    native_loops = cpu_loops == "cpu-native"
    got = cpu_ops.quantize(x.reshape(-1), layout, scheme, param_dtype, seed, native_loops=native_loops)
    expected = reference_parts(x, layout, scheme, param_dtype, seed)
    assert_same_parts(got, expected)
    back = cpu_ops.dequantize(*got, layout, scheme, dtype, native_loops=native_loops)
    want = reference.dequantize(*expected, layout, scheme, dtype)
    assert back.dtype == dtype and torch.equal(back.view(torch.uint8), want.view(torch.uint8))


@pytest.mark.parametrize("bits", [8, 2])
def test_signed_zeros_fold_the_same_in_whole_blocks_of_groups_as_group_by_group(bits):
    """Rows of +0.0 and -0.0 (a ReLU's output; negated for the maximum): which zero a range keeps
    decides the zero point's sign bit. The native loops fold whole blocks of 16 groups of a
    multiple of 16 values together; fewer than 16 groups per call take them group by group: both
    must keep the same zero, bit for bit (and the value of the reference's)."""
    if not native.available():
        pytest.skip(f"the native library is {native.status()}")
    generator = torch.Generator().manual_seed(11)
    signs = torch.randint(0, 2, (64, 48), generator=generator).float() * 2 - 1
    zeros = torch.zeros(64, 48) * signs  # +0.0 or -0.0 per element
    kept = torch.rand(64, 48, generator=generator) > 0.5
    positives = torch.rand(64, 48, generator=generator) * kept
    relu = torch.where(positives > 0, positives, zeros)
    for x in (relu, -relu):
        whole = native.quantize_groups(x, bits, None, None)
        parts = [native.quantize_groups(x[i : i + 8], bits, None, None) for i in range(0, 64, 8)]
        for got, pieces in zip(whole, zip(*parts, strict=True), strict=True):
            assert torch.equal(got.view(torch.uint8), torch.cat(pieces).view(torch.uint8))
        layout = GroupLayout.for_shape(tuple(x.shape), None, bits)
        _, scale, zero = reference_parts(x, layout, "uniform", torch.bfloat16, None)
        assert torch.equal(whole[1], scale) and torch.equal(whole[2], zero)  # -0.0 == 0.0 here


@pytest.mark.parametrize("nan_row", [0, 7, 8, 15, 21])
def test_a_nan_anywhere_in_a_block_of_groups_is_flagged_as_group_by_group(nan_row, cpu_loops):
    """The native loops range 16 whole groups at once, in sets of the CPU's vector width (two sets
    of 8 with AVX2); a NaN in any set sends the block back to one group at a time, which flags
    that group alone: every part equals the reference's, whichever set the NaN fell in."""
    x = torch.randn(48, 64, generator=torch.Generator().manual_seed(5))
    x[nan_row, 13] = float("nan")
    layout = GroupLayout.for_shape(tuple(x.shape), None, 2)
    native_loops = cpu_loops == "cpu-native"
    got = cpu_ops.quantize(
        x.reshape(-1), layout, "normal", torch.bfloat16, SEED, native_loops=native_loops
    )
    assert_same_parts(got, reference_parts(x, layout, "normal", torch.bfloat16, SEED))
    assert torch.isnan(got[1]).nonzero().flatten().tolist() == [nan_row]


def test_which_layouts_compile():
    cpu = torch.device("cpu")
    assert cpu_ops.compiles(GroupLayout(numel=640, group_len=64, bits=2), cpu)
    assert not cpu_ops.compiles(GroupLayout(numel=200, group_len=10, bits=2), cpu)
    assert cpu_ops.compiles(GroupLayout(numel=210, group_len=100, bits=4), cpu)
    assert not cpu_ops.compiles(GroupLayout(numel=30, group_len=64, bits=2), cpu)
    assert not cpu_ops.compiles(GroupLayout(numel=2**31, group_len=64, bits=2), cpu)
    assert not cpu_ops.compiles(
        GroupLayout(numel=640, group_len=64, bits=2), torch.device("meta")
    )


def test_any_number_of_groups_runs_one_inductor_graph():
    """Groups are a dynamic size: inductor's quantize and dequantize compile once for every tensor
    length (one group included), and give the reference's bytes at each."""
    layout_of = lambda rows: GroupLayout.for_shape((rows, 48), None, 4)  # noqa: E731
    inductor = {"native_loops": False}
    cpu_ops.quantize(torch.randn(5 * 48), layout_of(5), "uniform", torch.bfloat16, 1, **inductor)
    compiles = cpu_ops._compiled.cache_info().misses
    for rows in (1, *range(7, 300, 23)):
        x = torch.randn(rows, 48)
        parts = cpu_ops.quantize(
            x.reshape(-1), layout_of(rows), "uniform", torch.bfloat16, 3, **inductor
        )
        assert_same_parts(parts, reference_parts(x, layout_of(rows), "uniform", torch.bfloat16, 3))
        back = cpu_ops.dequantize(*parts, layout_of(rows), "uniform", torch.float32, **inductor)
        assert torch.equal(
            back, reference.dequantize(*parts, layout_of(rows), "uniform", torch.float32)
        )
    assert cpu_ops._compiled.cache_info().misses - compiles <= 1  # the dequantize graph


def test_the_public_api_reaches_it_and_a_seed_reproduces_the_codes(cpu_loops):
    x = torch.randn(50, 64)
    before = backend_usage()
    first = quantize(x, bits=2, seed=11, backend=cpu_loops)
    assert torch.equal(first.codes, quantize(x, bits=2, seed=11, backend=cpu_loops).codes)
    assert not torch.equal(first.codes, quantize(x, bits=2, seed=12, backend=cpu_loops).codes)
    layout = GroupLayout.for_shape(tuple(x.shape), None, 2)
    assert_same_parts(first.tensors(), reference_parts(x, layout, "uniform", torch.bfloat16, 11))
    assert torch.equal(dequantize(first, backend=cpu_loops), dequantize(first, backend="torch"))
    assert backend_usage(since=before) == {
        "dequantize": {cpu_loops: 1, "torch": 1},
        "quantize": {cpu_loops: 3},
    }


def test_auto_uses_the_cpu_loops_for_large_cpu_tensors_only(monkeypatch, cpu_loops):
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    before = backend_usage()
    quantize(torch.randn(4, 64), seed=1)
    assert backend_usage(since=before) == {"quantize": {"torch": 1}}
    quantize(torch.randn(dispatch.CPU_LOOPS_MIN_NUMEL // 64, 64), seed=1)
    assert backend_usage(since=before) == {"quantize": {cpu_loops: 1, "torch": 1}}


@pytest.mark.parametrize("bits", [1, 2])
def test_stochastic_rounding_is_unbiased(bits: int, cpu_loops):
    """The mean of many draws converges to x; round-to-nearest (the control) stays off by far more."""
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(0))
    draws = 600
    total = torch.zeros_like(x)
    for seed in range(draws):
        total += dequantize(quantize(x, bits=bits, seed=seed, backend=cpu_loops), backend="torch")
    step = (x.amax(1, keepdim=True) - x.amin(1, keepdim=True)) / (2**bits - 1)
    error = ((total / draws - x) / step).abs()
    # per element the mean of `draws` roundings has std <= 0.5 step / sqrt(draws) = 0.02 step
    assert float(error.mean()) < 0.02 and float(error.max()) < 0.11
    nearest = dequantize(quantize(x, bits=bits, stochastic=False, backend=cpu_loops))
    assert float(((nearest - x) / step).abs().mean()) > 0.1


def test_runs_inside_saved_tensor_hooks_and_gradients_follow():
    """As `tinykg_train.compress` uses it: quantize in the pack hook, dequantize in the unpack hook."""
    w = torch.randn(64, 64, requires_grad=True)
    x = torch.randn(2048, 64)

    def pack(t):
        return quantize(t, bits=8, seed=5, backend="cpu-inductor") if t.numel() > 64 * 64 else t

    def unpack(p):
        return dequantize(p, backend="cpu-inductor") if not isinstance(p, torch.Tensor) else p

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = torch.relu(x @ w).pow(2).sum()
    loss.backward()
    plain = w.detach().requires_grad_()
    (exact,) = torch.autograd.grad(torch.relu(x @ plain).pow(2).sum(), [plain])
    assert 0 < float((w.grad - exact).norm() / exact.norm()) < 0.02  # rounded, and by little


def test_a_failed_compile_warns_once_and_runs_the_same_math_eagerly(no_compiler):
    x = torch.randn(64, 64)
    layout = GroupLayout.for_shape(tuple(x.shape), None, 2)
    with pytest.warns(RuntimeWarning, match="torch.compile failed .*No working C\\+\\+ compiler"):
        got = cpu_ops.quantize(x.reshape(-1), layout, "uniform", torch.bfloat16, SEED)
    assert_same_parts(got, reference_parts(x, layout, "uniform", torch.bfloat16, SEED))
    assert (
        cpu_ops.failure() == "RuntimeError: InvalidCxxCompiler: No working C++ compiler found"
    )
    assert dispatch.select_backend(torch.device("cpu"), "auto", 10**6) == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning; nothing compiles any more
        again = cpu_ops.quantize(x.reshape(-1), layout, "uniform", torch.bfloat16, SEED)
    assert_same_parts(again, got)
