"""`bi_interaction` (KGAT's aggregator) against the composition of plain torch ops; its backward's
peak memory on the CPU."""

import ctypes

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.blocks import MIN_MATMUL_ROWS, spans
from tinykg_train.compress.ops import bi_interaction, bi_interaction_rows, leaky_relu, linear, mul

ALL_BITS = (32, 8, 4, 2, 1)
SLOPE = 0.2


def make_inputs(dtype: torch.dtype = torch.float32, n: int = 90, dim: int = 64, out: int = 32):
    gen = torch.Generator().manual_seed(0)
    tensors = (
        torch.randn(n, dim, generator=gen, dtype=dtype),
        torch.randn(n, dim, generator=gen, dtype=dtype) + 0.5,
        torch.randn(out, dim, generator=gen, dtype=dtype) / dim**0.5,
        torch.randn(out, generator=gen, dtype=dtype) / 10,
        torch.randn(out, dim, generator=gen, dtype=dtype) / dim**0.5,
        torch.randn(out, generator=gen, dtype=dtype) / 10,
    )
    return [t.requires_grad_() for t in tensors]


def plain(ego, neighbors, w1, b1, w2, b2):
    return F.leaky_relu(F.linear(ego + neighbors, w1, b1), SLOPE) + F.leaky_relu(
        F.linear(ego * neighbors, w2, b2), SLOPE
    )


def fused(config):
    return lambda *args: bi_interaction(*args, SLOPE, config=config)


@pytest.mark.parametrize("bits", ALL_BITS)
def test_forward_is_the_plain_formula_bit_for_bit(bits):
    inputs = make_inputs()
    assert torch.equal(fused(CompressionConfig(bits=bits))(*inputs), plain(*inputs))


def test_function_backward_matches_finite_differences_and_plain_ops(exact_functions, grad_tools):
    inputs = make_inputs(torch.float64)
    small = [t[:5, :6] if t.dim() == 2 and t.shape[0] == 90 else t for t in inputs]
    small = [t.detach()[:, :6] if t.dim() == 2 and t.shape[0] == 32 else t for t in small]
    small = [t.detach().requires_grad_() for t in small]
    assert torch.autograd.gradcheck(fused(exact_functions), small)
    probe = torch.randn(90, 32, dtype=torch.float64)
    ours = grad_tools.gradients(fused(exact_functions), inputs, probe)
    reference = grad_tools.gradients(plain, inputs, probe)
    for x, y in zip(ours, reference, strict=True):
        torch.testing.assert_close(x, y)


def test_only_the_wanted_gradients(exact_functions):
    ego, neighbors, w1, b1, w2, b2 = make_inputs(torch.float64)
    out = fused(exact_functions)(ego.detach(), neighbors, w1.detach(), None, w2, b2.detach())
    grads = torch.autograd.grad(out.sum(), [neighbors, w2])
    assert all(g is not None for g in grads)
    reference = torch.autograd.grad(
        plain(ego.detach(), neighbors, w1.detach(), None, w2, b2.detach()).sum(), [neighbors, w2]
    )
    for x, y in zip(grads, reference, strict=True):
        torch.testing.assert_close(x, y)


def test_gradients_at_8_bits_within_one_percent(grad_tools):
    inputs = make_inputs()
    probe = torch.randn(90, 32, generator=torch.Generator().manual_seed(1))
    exact = grad_tools.gradients(plain, inputs, probe)
    torch.manual_seed(1)
    approx = grad_tools.gradients(fused(CompressionConfig(bits=8)), inputs, probe)
    for x, e in zip(approx, exact, strict=True):
        assert grad_tools.relative_error(x, e) < 0.015  # W2's reads two rounded factors


def test_gradients_at_2_bits_are_unbiased_and_round_to_nearest_is_not(grad_tools):
    """Weight gradients read e + n and e * n rebuilt from independently rounded factors; input
    gradients read one factor each: all unbiased. Biases' gradients are exact (masks only)."""
    inputs = make_inputs()
    probe = torch.randn(90, 32, generator=torch.Generator().manual_seed(4))
    exact = grad_tools.gradients(plain, inputs, probe)
    for stochastic, check in ((True, lambda r: r < 2.0), (False, lambda r: r > 10.0)):
        config = CompressionConfig(bits=2, stochastic=stochastic)
        samples = grad_tools.draws(fused(config), inputs, probe, range(64))
        for position in (0, 1, 2, 4):
            ratio = grad_tools.bias_ratio([s[position] for s in samples], exact[position])
            assert check(ratio), (stochastic, position, ratio)


def test_saves_two_factors_and_two_masks_not_four_activations():
    ego, neighbors, *weights = make_inputs(n=400)
    w1, b1, w2, b2 = map(torch.nn.Parameter, weights)  # held by the model: never counted
    config = CompressionConfig(bits=2)
    with ActivationMeter() as meter:
        out = fused(config)(ego, neighbors, w1, b1, w2, b2)
    factor = 400 * 64 / 4 + 400 * 4  # 2-bit codes and a 16-bit scale and zero per row
    masks = 2 * 400 * 32 / 8
    assert out.requires_grad
    assert meter.total_bytes == factor * 2 + masks
    with ActivationMeter() as meter:
        composed = leaky_relu(linear(ego + neighbors, w1, b1, config=config), SLOPE, config=config)
        product = linear(mul(ego, neighbors, config=config), w2, b2, config=config)
        composed = composed + leaky_relu(product, SLOPE, config=config)
    assert meter.total_bytes == factor * 4 + masks

    table = torch.nn.Parameter(ego.detach().clone())  # the first layer: ego is the embedding table
    with ActivationMeter() as meter:
        out = fused(config)(table, neighbors, w1, b1, w2, b2)
    assert meter.total_bytes == factor + masks  # the table is held anyway: kept as it is


def propagation(n: int = 90, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A sparse-ish neighbor matrix with no self-loops (what keeps the recomputed product unbiased)."""
    gen = torch.Generator().manual_seed(5)
    matrix = (torch.rand(n, n, generator=gen) < 0.1).to(dtype) * torch.rand(n, n, generator=gen)
    return matrix.fill_diagonal_(0).to_sparse_csr()


def through_graph(matrix, config):
    """The layer's use: neighbors = A ego, and the op told how to recompute them."""

    def op(ego, w1, b1, w2, b2):
        neighbors_of = lambda x: matrix @ x  # noqa: E731
        return bi_interaction(
            ego, neighbors_of(ego), w1, b1, w2, b2, SLOPE, config=config, neighbors_of=neighbors_of
        )

    return op


def plain_through_graph(matrix):
    return lambda ego, w1, b1, w2, b2: plain(ego, matrix @ ego, w1, b1, w2, b2)


def test_recomputed_neighbors_give_the_plain_gradients(exact_functions, grad_tools):
    ego, _, w1, b1, w2, b2 = make_inputs(torch.float64)
    matrix = propagation(dtype=torch.float64)
    probe = torch.randn(90, 32, dtype=torch.float64)
    inputs = (ego, w1, b1, w2, b2)
    ours = grad_tools.gradients(through_graph(matrix, exact_functions), inputs, probe)
    reference = grad_tools.gradients(plain_through_graph(matrix), inputs, probe)
    for x, y in zip(ours, reference, strict=True):
        torch.testing.assert_close(x, y)


def test_recomputed_neighbors_keep_the_2_bit_gradients_unbiased(grad_tools):
    ego, _, w1, b1, w2, b2 = make_inputs()
    matrix, inputs = propagation(), (ego, w1, b1, w2, b2)
    probe = torch.randn(90, 32, generator=torch.Generator().manual_seed(4))
    exact = grad_tools.gradients(plain_through_graph(matrix), inputs, probe)
    for stochastic, check in ((True, lambda r: r < 2.0), (False, lambda r: r > 10.0)):
        config = CompressionConfig(bits=2, stochastic=stochastic)
        samples = grad_tools.draws(through_graph(matrix, config), inputs, probe, range(64))
        for position in (0, 1, 3):  # ego, W1, W2
            ratio = grad_tools.bias_ratio([s[position] for s in samples], exact[position])
            assert check(ratio), (stochastic, position, ratio)


def test_recomputed_neighbors_are_not_stored():
    ego, _, *weights = make_inputs(n=400)
    w1, b1, w2, b2 = map(torch.nn.Parameter, weights)
    matrix = propagation(400)
    config = CompressionConfig(bits=2)
    with ActivationMeter() as meter:
        out = through_graph(matrix, config)(ego, w1, b1, w2, b2)
    assert out.requires_grad
    assert meter.total_bytes == (400 * 64 / 4 + 400 * 4) + 2 * 400 * 32 / 8  # ego and two masks


def through_block(matrix, targets, config):
    """A sampled layer block: `x` the block's sources, the first `targets` of them its targets,
    neighbors = B x with B [targets, sources]; the op keeps the sources, not the targets."""

    def op(x, w1, b1, w2, b2):
        neighbors_of = lambda s: matrix @ s  # noqa: E731
        return bi_interaction(
            x[:targets], neighbors_of(x), w1, b1, w2, b2, SLOPE, config=config,
            neighbors_of=neighbors_of, sources=x,
        )  # fmt: skip

    return op


def block_matrix(targets: int = 40, n: int = 90, dtype: torch.dtype = torch.float32):
    """B [targets, n]: rows of `propagation`'s matrix (no node its own neighbor)."""
    return propagation(n, dtype).to_dense()[:targets].to_sparse_csr()


def plain_through_block(matrix, targets):
    return lambda x, w1, b1, w2, b2: plain(x[:targets], matrix @ x, w1, b1, w2, b2)


def test_a_block_recomputed_from_its_sources_gives_the_plain_gradients(exact_functions, grad_tools):
    x, _, w1, b1, w2, b2 = make_inputs(torch.float64)
    matrix = block_matrix(dtype=torch.float64)
    probe = torch.randn(40, 32, dtype=torch.float64)
    inputs = (x, w1, b1, w2, b2)
    ours = grad_tools.gradients(through_block(matrix, 40, exact_functions), inputs, probe)
    reference = grad_tools.gradients(plain_through_block(matrix, 40), inputs, probe)
    for got, want in zip(ours, reference, strict=True):
        torch.testing.assert_close(got, want)


def test_a_block_keeps_the_2_bit_gradients_unbiased(grad_tools):
    x, _, w1, b1, w2, b2 = make_inputs()
    matrix, inputs = block_matrix(), (x, w1, b1, w2, b2)
    probe = torch.randn(40, 32, generator=torch.Generator().manual_seed(4))
    exact = grad_tools.gradients(plain_through_block(matrix, 40), inputs, probe)
    samples = grad_tools.draws(
        through_block(matrix, 40, CompressionConfig(bits=2)), inputs, probe, range(64)
    )
    for position in (0, 1, 3):  # sources, W1, W2
        ratio = grad_tools.bias_ratio([s[position] for s in samples], exact[position])
        assert ratio < 2.0, (position, ratio)


def test_a_block_stores_its_sources_once_and_neither_factor():
    x, _, *weights = make_inputs(n=400)
    w1, b1, w2, b2 = map(torch.nn.Parameter, weights)
    matrix = block_matrix(100, 400)
    with ActivationMeter() as meter:
        out = through_block(matrix, 100, CompressionConfig(bits=2))(x, w1, b1, w2, b2)
    assert out.shape == (100, 32)
    assert meter.total_bytes == (400 * 64 / 4 + 400 * 4) + 2 * 100 * 32 / 8  # sources, two masks


def test_sources_need_the_map_to_the_neighbors():
    x, neighbors, *weights = make_inputs()
    with pytest.raises(ValueError, match="'sources' needs 'neighbors_of'"):
        bi_interaction(x, neighbors, *weights, config=CompressionConfig(bits=2), sources=x)


class Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")
    ]  # fmt: skip


def _mallinfo2():
    """glibc's `mallinfo2` (2.33+), or None."""
    try:
        function = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return None
    function.restype = Mallinfo2
    return function


MALLINFO2 = _mallinfo2()


class HeapPeak(TorchDispatchMode):
    """The most bytes malloc had handed out (heap and mmap) after any op run in the block, over
    what it had at the start: a CPU peak at op granularity."""

    def __enter__(self):
        self.start = self.peak = self.in_use()
        return super().__enter__()

    @staticmethod
    def in_use() -> int:
        info = MALLINFO2()
        return info.uordblks + info.hblkhd

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, self.in_use())
        return out


@pytest.mark.skipif(MALLINFO2 is None, reason="needs glibc's mallinfo2")
def test_backward_drops_its_whole_graph_temporaries_as_it_goes():
    # Its peak, not the bytes saved, bounds a KGAT step's memory: with every temporary held until
    # the backward returned (the decoded ego, the recomputed neighbors, the rebuilt inputs, both
    # masked gradients and their products with the weights) it was 8.2 [rows, width] buffers
    # above the start; dropping each once used, 5.2 (two of them are the gradients it returns).
    rows, width = 20_000, 64
    gen = torch.Generator().manual_seed(0)
    ego = torch.randn(rows, width, generator=gen, requires_grad=True)
    w1, w2 = (torch.randn(width, width, generator=gen, requires_grad=True) for _ in range(2))
    b1, b2 = (torch.zeros(width, requires_grad=True) for _ in range(2))

    def neighbors_of(x):  # a fixed linear map of the ego vectors, like A @ x
        return (x.roll(1, 0) + x.roll(-1, 0)) * 0.5

    computed = ego * 1.0  # an activation, not a parameter: stored compressed
    out = bi_interaction(
        computed, neighbors_of(computed), w1, b1, w2, b2, SLOPE,
        config=CompressionConfig(bits=2), neighbors_of=neighbors_of,
    )  # fmt: skip
    grad = torch.randn(out.shape, generator=gen)
    with HeapPeak() as heap:
        out.backward(grad)
    buffers = (heap.peak - heap.start) / (rows * width * 4)
    assert 2 <= buffers < 6.5, buffers


class CountingNeighbors:
    """A fixed linear map of the ego vectors (like A @ x) that counts its whole and row calls."""

    def __init__(self) -> None:
        self.whole_calls = self.row_calls = 0

    def __call__(self, x):
        self.whole_calls += 1
        return (x.roll(1, 0) + x.roll(-1, 0)) * 0.5

    def rows(self, x, start, stop):
        self.row_calls += 1
        return self(x)[start:stop]


@pytest.mark.parametrize("block_bytes, fits", [(1 << 20, True), (64 << 10, False)])
def test_blocked_backward_recomputes_the_neighbors_once_when_they_fit_the_budget(block_bytes, fits):
    # the whole neighbors take 256 KiB: within a 1 MiB budget, not within 64 KiB
    rows, width = 1024, 64
    blocks = len(list(spans(rows, 3 * (width + width) * 4, block_bytes, MIN_MATMUL_ROWS)))
    assert blocks > 1
    gen = torch.Generator().manual_seed(0)
    ego = torch.randn(rows, width, generator=gen, requires_grad=True)
    w1, w2 = (torch.randn(width, width, generator=gen, requires_grad=True) for _ in range(2))
    neighbors_of = CountingNeighbors()
    computed = ego * 1.0
    out = bi_interaction(
        computed, neighbors_of(computed), w1, None, w2, None, SLOPE,
        config=CompressionConfig(bits=2), neighbors_of=neighbors_of, block_bytes=block_bytes,
    )  # fmt: skip
    before = neighbors_of.whole_calls
    out.backward(torch.randn(out.shape, generator=gen))
    # fits: one sparse product for the whole backward; else each block's rows for each of 3 uses
    assert neighbors_of.row_calls == (0 if fits else 3 * blocks)
    assert neighbors_of.whole_calls - before - neighbors_of.row_calls == (1 if fits else 0)


@pytest.mark.cuda
def test_on_cuda_the_default_budget_cuts_a_large_graph_into_at_most_the_cap_of_blocks():
    # 1.25M rows (the 10M-triple graph): 58 blocks of the CPU's budget, CUDA_MAX_BLOCKS on a GPU
    # (each block a few dozen launches); the neighbors (320 MB) exceed one block there (240 MB),
    # so each block recomputes its rows
    from tinykg_train.compress.blocks import CUDA_MAX_BLOCKS

    rows, width, device = 1_250_000, 64, torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(0)
    ego = torch.randn(rows, width, generator=gen, device=device, requires_grad=True)
    w1, w2 = (
        torch.randn(width, width, generator=gen, device=device, requires_grad=True)
        for _ in range(2)
    )
    neighbors_of = CountingNeighbors()
    computed = ego * 1.0
    out = bi_interaction(
        computed, neighbors_of(computed), w1, None, w2, None, SLOPE,
        config=CompressionConfig(bits=2), neighbors_of=neighbors_of,
    )  # fmt: skip
    out.backward(torch.randn(out.shape, generator=gen, device=device))
    assert neighbors_of.row_calls == 3 * CUDA_MAX_BLOCKS


@pytest.mark.parametrize("block_bytes", [None, 64 << 10])
def test_scoring_rows_are_the_whole_forward_bit_for_bit_a_block_at_a_time(block_bytes):
    rows, width, out_width = 1024, 64, 32
    gen = torch.Generator().manual_seed(0)
    ego = torch.randn(rows, width, generator=gen)
    w1, w2 = (torch.randn(out_width, width, generator=gen) / 8 for _ in range(2))
    b1, b2 = (torch.randn(out_width, generator=gen) / 10 for _ in range(2))
    neighbors_of = CountingNeighbors()
    expected = plain(ego, neighbors_of(ego), w1, b1, w2, b2)
    got = bi_interaction_rows(ego, neighbors_of, w1, b1, w2, b2, SLOPE, block_bytes=block_bytes)
    assert torch.equal(got, expected)
    blocks = 1 if block_bytes is None else neighbors_of.row_calls
    assert neighbors_of.row_calls == blocks and (block_bytes is None or blocks > 4)
    assert not got.requires_grad


@pytest.mark.skipif(MALLINFO2 is None, reason="needs glibc's mallinfo2")
def test_scoring_rows_hold_no_whole_neighbors_or_pre_activations():
    # the whole forward holds ego, neighbors, both pre-activations and the output (5 buffers of
    # [rows, width] at once); a block at a time, the output and a block's temporaries
    rows, width = 20_000, 64
    gen = torch.Generator().manual_seed(0)
    ego = torch.randn(rows, width, generator=gen)
    w1, w2 = (torch.randn(width, width, generator=gen) / 8 for _ in range(2))

    class Neighbors:
        def rows(self, x, start, stop):
            return (x[start:stop] + x[start:stop].roll(1, 0)) * 0.5

    def run():
        return bi_interaction_rows(ego, Neighbors(), w1, None, w2, None, SLOPE, block_bytes=1 << 20)

    run()  # the first call's one-time allocations (BLAS buffers) stay: not the op's
    with HeapPeak() as heap:
        run()
    buffers = (heap.peak - heap.start) / (rows * width * 4)
    assert 1 <= buffers < 1.5, buffers
