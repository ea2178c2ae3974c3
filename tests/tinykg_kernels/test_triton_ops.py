"""Triton kernels against the torch reference: bit for bit with shared noise, unbiased with their
own Philox noise, every output element written. On CPU they run under TRITON_INTERPRET=1 (set by
tests/conftest.py); the `cuda` tests rerun the comparison on a GPU at larger sizes."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from tinykg_kernels import dequantize, dispatch, quantize, reference  # noqa: E402
from tinykg_kernels.levels import interval_constants  # noqa: E402
from tinykg_kernels.packing import GroupLayout  # noqa: E402

ops = dispatch.triton_ops()
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and not ops.INTERPRETED:
    pytest.skip(
        "CPU tensors need Triton's interpreter (TRITON_INTERPRET=1)", allow_module_level=True
    )

F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
CASES = [
    # shape, group_size, bits, scheme, input dtype, parameter dtype
    ((33, 70), None, 2, "uniform", F32, BF16),
    ((5, 3, 17), None, 1, "uniform", F16, F16),
    ((1000,), 64, 4, "uniform", BF16, BF16),  # blocks, short last block
    ((7, 9), 5, 8, "uniform", F32, F32),  # blocks across rows
    ((2, 300), None, 2, "normal", F32, BF16),
    ((19,), None, 2, "normal", BF16, F32),
    ((64, 64), None, 2, "uniform", F32, BF16),  # whole tiles: the unmasked kernels
    ((32, 64), None, 8, "uniform", F16, F16),
    ((16, 32), None, 4, "uniform", F64, BF16),
    ((), None, 1, "uniform", F32, BF16),
]


def case_id(case) -> str:
    shape, group_size, bits, scheme, dtype, param = case
    return f"{'x'.join(map(str, shape)) or 'scalar'}-g{group_size}-int{bits}-{scheme}-{str(dtype)[6:]}-{str(param)[6:]}"


def sample(shape, dtype, seed=0) -> torch.Tensor:
    """Gaussian rows at mixed scales, with a zero row and a constant row when there are rows."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    if x.dim() >= 2 and x.shape[0] >= 3:
        x = x * torch.logspace(-2, 2, x.shape[0], dtype=torch.float64).view(
            -1, *[1] * (x.dim() - 1)
        )
        x[0] = 0.0
        x[1] = 1.5
    return x.to(dtype).to(DEVICE)


def garbage_outputs(layout: GroupLayout, param_dtype, fill: int):
    """Preallocated outputs full of garbage: anything the kernel forgets to write shows."""
    codes = torch.full(
        (layout.n_groups, layout.bytes_per_group), fill, dtype=torch.uint8, device=DEVICE
    )
    scale = torch.full((layout.n_groups,), float("nan"), dtype=param_dtype, device=DEVICE)
    return codes, scale, scale.clone()


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN equal to NaN (and -0.0 equal to 0.0)."""
    a, b = a.double(), b.double()
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_matches_the_reference_bit_for_bit(case):
    shape, group_size, bits, scheme, dtype, param_dtype = case
    x = sample(shape, dtype)
    flat = x.reshape(-1)
    layout = GroupLayout.for_shape(shape, group_size, bits)
    shared_noise = torch.rand(layout.numel, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    for noise, fill in ((None, 0xFF), (shared_noise, 0x00)):
        expected = reference.quantize(flat, layout, scheme, param_dtype, noise)
        got = ops.quantize(
            flat,
            layout,
            scheme,
            param_dtype,
            noise=noise,
            out=garbage_outputs(layout, param_dtype, fill),
        )
        assert torch.equal(got[0], expected[0]), "codes differ"
        assert same(got[1], expected[1]) and same(got[2], expected[2]), "parameters differ"
        out = torch.full((layout.numel,), float("nan"), dtype=dtype, device=DEVICE)
        back = ops.dequantize(*expected, layout, scheme, dtype, out=out)
        assert same(back, reference.dequantize(*expected, layout, scheme, dtype)), (
            "dequantized values differ"
        )


@pytest.mark.filterwarnings(
    "ignore:invalid value encountered:RuntimeWarning"
)  # NaN/inf in, on purpose
def test_bad_groups_match_the_reference():
    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(2))
    x[1, 5] = float("nan")
    x[2, 39] = float("inf")
    x[3, 0] = float("-inf")
    x[4] = torch.tensor([0.0, 70000.0] * 20)  # overflows a float16 scale at 1 bit
    x = x.to(DEVICE)
    layout = GroupLayout.for_shape((6, 40), None, 1)
    expected = reference.quantize(x.reshape(-1), layout, "uniform", F16, None)
    got = ops.quantize(
        x.reshape(-1), layout, "uniform", F16, out=garbage_outputs(layout, F16, 0xFF)
    )
    assert got[1].isnan().tolist() == [False, True, True, True, True, False]
    assert (
        torch.equal(got[0], expected[0]) and same(got[1], expected[1]) and same(got[2], expected[2])
    )


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_api_raises_on_nan_through_triton_too():
    x = torch.randn(4, 8, device=DEVICE)
    x[2, 2] = float("nan")
    with pytest.raises(ValueError, match=r"1 NaN/Inf values \(in 1 of 4 groups"):
        quantize(x, backend="triton")


@pytest.mark.parametrize(
    ("bits", "scheme"), [(2, "uniform"), (2, "normal"), (1, "uniform"), (8, "uniform")]
)
def test_philox_noise_is_unbiased_and_moves_at_most_one_level(bits, scheme):
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    n = 512
    rows = x.repeat(n, 1)
    q = quantize(rows, bits=bits, scheme=scheme, seed=11, backend="triton")
    back = dequantize(q, backend="triton")
    step = q.scale.float()[:8, None].expand(8, 64)
    assert ((back - rows).abs().view(n, 8, 64) <= step * (1 + 1e-6)).all()
    if scheme == "normal":  # the widest gap between two levels bounds the step
        step = step * max(1 / w for w in interval_constants(64)[1])
    z = (back.view(n, 8, 64).double().mean(0) - x.double()).abs() / (step.double() / 2 / n**0.5)
    assert z.max() < 5.0
    nearest = dequantize(
        quantize(rows, bits=bits, scheme=scheme, stochastic=False, backend="triton")
    )
    z_nearest = (nearest.view(n, 8, 64).double().mean(0) - x.double()).abs() / (
        step.double() / 2 / n**0.5
    )
    assert z_nearest.max() > 5.0  # control: a biased rounding fails the same check


def test_seeds_and_tile_sizes(monkeypatch):
    """Same seed, same codes; another seed, other codes; and the draws do not depend on how the
    launcher tiles the tensor (small tiles also take the two-pass path for long groups)."""
    x = sample((40, 70), F32)
    flat = x.reshape(-1)
    layout = GroupLayout.for_shape((40, 70), None, 2)
    first = ops.quantize(flat, layout, "uniform", BF16, seed=5)
    assert torch.equal(first[0], ops.quantize(flat, layout, "uniform", BF16, seed=5)[0])
    assert not torch.equal(first[0], ops.quantize(flat, layout, "uniform", BF16, seed=6)[0])
    monkeypatch.setattr(ops, "TILE_ELEMENTS", 256)
    monkeypatch.setattr(ops, "MAX_CHUNK_COLUMNS", 16)
    launch = ops.quantize_launch(
        flat, layout, "uniform", BF16, garbage_outputs(layout, BF16, 0), seed=5
    )
    assert not launch.constants["SINGLE_CHUNK"] and launch.args[-2] == 5  # five chunks of 16 codes
    chunked = ops.quantize(
        flat, layout, "uniform", BF16, seed=5, out=garbage_outputs(layout, BF16, 0xFF)
    )
    assert torch.equal(chunked[0], first[0]) and same(chunked[1], first[1])
    expected = reference.quantize(flat, layout, "uniform", BF16, None)
    assert torch.equal(ops.quantize(flat, layout, "uniform", BF16)[0], expected[0])
    back = ops.dequantize(
        *expected, layout, "uniform", F32, out=torch.full((2800,), float("nan"), device=DEVICE)
    )
    assert same(back, reference.dequantize(*expected, layout, "uniform", F32))


def test_launcher_picks_unmasked_power_of_two_tiles():
    layout = GroupLayout.for_shape((4096, 64), None, 2)
    outputs = garbage_outputs(layout, BF16, 0)
    launch = ops.quantize_launch(
        torch.zeros(4096 * 64, device=DEVICE), layout, "uniform", BF16, outputs
    )
    block_r, block_c = launch.constants["BLOCK_R"], launch.constants["BLOCK_C"]
    assert block_c == 64 and block_r & (block_r - 1) == 0 and not launch.constants["MASKED"]
    assert launch.grid == (4096 // block_r,)
    odd = GroupLayout.for_shape((10, 70), None, 2)
    assert ops.quantize_launch(
        torch.zeros(700, device=DEVICE), odd, "uniform", BF16, garbage_outputs(odd, BF16, 0)
    ).constants["MASKED"]


def test_host_tile_arithmetic_matches_tritons():
    """The launchers' plain-Python cdiv / next power of two (triton's own are slow on the host)."""
    import triton

    for n in range(1, 1100):
        assert ops._next_power_of_2(n) == triton.next_power_of_2(n)
        assert ops._cdiv(n, 64) == triton.cdiv(n, 64) and ops._cdiv(n, 7) == triton.cdiv(n, 7)


@pytest.mark.cuda
@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize(
    ("shape", "dtype"), [((100_003, 64), F32), ((4097, 70), BF16), ((3, 100_000), F16)]
)
def test_cuda_matches_torch_at_scale(shape, dtype, bits):
    x = torch.randn(shape, device="cuda", dtype=dtype)
    layout = GroupLayout.for_shape(shape, None, bits)
    noise = torch.rand(layout.numel, device="cuda")
    param = F16 if dtype == F16 else BF16
    for shared in (None, noise):
        expected = reference.quantize(x.reshape(-1), layout, "uniform", param, shared)
        got = ops.quantize(x.reshape(-1), layout, "uniform", param, noise=shared)
        assert torch.equal(got[0], expected[0]) and same(got[1], expected[1])
        assert same(
            ops.dequantize(*got, layout, "uniform", dtype),
            reference.dequantize(*got, layout, "uniform", dtype),
        )


@pytest.mark.cuda
def test_cuda_auto_uses_triton(monkeypatch):
    monkeypatch.setenv(dispatch.BACKEND_ENV, "auto")
    calls = []
    real = ops.quantize
    monkeypatch.setattr(ops, "quantize", lambda *a, **k: calls.append(1) or real(*a, **k))
    quantize(torch.randn(1024, 64, device="cuda"))
    assert calls == [1]
