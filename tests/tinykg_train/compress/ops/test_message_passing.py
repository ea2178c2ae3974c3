import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.ops import spmm
from tinykg_train.compress.ops.message_passing import aggregate

ALL_BITS = (32, 8, 4, 2, 1)
NUM_SRC, NUM_NODES, EDGES, DIM = 40, 30, 400, 33


def make_graph(dtype: torch.dtype = torch.float32, index_dtype: torch.dtype = torch.int64):
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.stack(
        [
            torch.randint(0, NUM_SRC, (EDGES,), generator=gen),
            torch.randint(0, NUM_NODES - 2, (EDGES,), generator=gen),  # two nodes get no edges
        ]
    ).to(index_dtype)
    x = torch.randn(NUM_SRC, DIM, generator=gen, dtype=dtype).requires_grad_()
    weight = torch.rand(EDGES, generator=gen, dtype=dtype).requires_grad_()
    return edge_index, x, weight


def gather_scatter(src, dst, x, weight, num_nodes, reduce):
    """The aggregation as PyG-style message passing: gather messages, scale, scatter-add."""
    messages = x.index_select(0, src)
    if weight is not None:
        messages = messages * weight[:, None]
    out = x.new_zeros((num_nodes, *x.shape[1:])).index_add(0, dst, messages)
    if reduce == "mean":
        degree = torch.bincount(dst.long(), minlength=num_nodes).clamp(min=1).to(x.dtype)
        out = out / degree[:, None]
    return out


def dense_reference(edge_index, x, weight, reduce):
    """The same aggregation as a dense adjacency product (an independent formulation)."""
    adjacency = torch.zeros(NUM_NODES, NUM_SRC, dtype=x.dtype)
    adjacency.index_put_((edge_index[1].long(), edge_index[0].long()), weight, accumulate=True)
    if reduce == "mean":
        degree = torch.bincount(edge_index[1].long(), minlength=NUM_NODES).clamp(min=1)
        adjacency = adjacency / degree[:, None].to(x.dtype)
    return adjacency @ x


@pytest.mark.parametrize("bits", ALL_BITS)
@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [True, False])
def test_forward_is_exact_at_every_bit_width(bits, reduce, weighted):
    edge_index, x, weight = make_graph()
    weight = weight if weighted else None
    out = spmm(edge_index, x, NUM_NODES, weight, config=CompressionConfig(bits=bits), reduce=reduce)
    plain = aggregate(edge_index[0], edge_index[1], x, weight, NUM_NODES, reduce)
    assert torch.equal(out, plain)
    ones = torch.ones(EDGES)
    dense = dense_reference(edge_index, x, weight if weighted else ones, reduce)
    torch.testing.assert_close(out, dense, rtol=1e-5, atol=1e-5)
    scattered = gather_scatter(edge_index[0], edge_index[1], x, weight, NUM_NODES, reduce)
    torch.testing.assert_close(out, scattered, rtol=1e-5, atol=1e-5)
    assert out[-2:].abs().sum() == 0  # nodes without incoming edges


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_function_backward_matches_finite_differences_and_plain_op(
    exact_functions, grad_tools, reduce, index_dtype
):
    edge_index, x, weight = make_graph(torch.float64, index_dtype)
    small = edge_index[:, :40]
    op = lambda x, w: spmm(small, x, NUM_NODES, w, config=exact_functions, reduce=reduce)  # noqa: E731
    assert torch.autograd.gradcheck(op, (x[:, :3].detach().requires_grad_(), weight[:40]))
    probe = torch.randn(NUM_NODES, DIM, dtype=torch.float64)
    ours = grad_tools.gradients(
        lambda x, w: spmm(edge_index, x, NUM_NODES, w, config=exact_functions, reduce=reduce),
        (x, weight),
        probe,
    )
    plain = grad_tools.gradients(
        lambda x, w: gather_scatter(edge_index[0], edge_index[1], x, w, NUM_NODES, reduce),
        (x, weight),
        probe,
    )
    for a, b in zip(ours, plain, strict=True):
        torch.testing.assert_close(a, b)


def test_gradients_at_8_bits_within_one_percent(grad_tools):
    edge_index, x, weight = make_graph()
    probe = gather_scatter(edge_index[0], edge_index[1], x, weight, NUM_NODES, "sum").detach()
    op = lambda x, w, c: spmm(edge_index, x, NUM_NODES, w, config=c)  # noqa: E731
    exact = grad_tools.gradients(lambda x, w: op(x, w, CompressionConfig()), (x, weight), probe)
    torch.manual_seed(1)
    approx = grad_tools.gradients(
        lambda x, w: op(x, w, CompressionConfig(bits=8)), (x, weight), probe
    )
    for a, e in zip(approx, exact, strict=True):
        assert grad_tools.relative_error(a, e) < 0.01


def test_gradients_at_2_bits_are_unbiased_and_round_to_nearest_is_not(grad_tools):
    edge_index, x, weight = make_graph()
    probe = torch.randn(NUM_NODES, DIM, generator=torch.Generator().manual_seed(5))
    op = lambda x, w, c: spmm(edge_index, x, NUM_NODES, w, config=c)  # noqa: E731
    exact = grad_tools.gradients(lambda x, w: op(x, w, CompressionConfig()), (x, weight), probe)
    for stochastic, check in ((True, lambda r: r < 2.0), (False, lambda r: r > 10.0)):
        config = CompressionConfig(bits=2, stochastic=stochastic)
        samples = grad_tools.draws(
            lambda x, w, c=config: op(x, w, c), (x, weight), probe, range(64)
        )
        for position in (0, 1):  # grad x reads the saved weights, grad weight the saved x
            ratio = grad_tools.bias_ratio([s[position] for s in samples], exact[position])
            assert check(ratio), (stochastic, position, ratio)


def test_saves_dense_operand_weights_and_narrow_indices_not_messages():
    edge_index, x, weight = make_graph()
    x_bytes, weight_bytes = x.numel() * 4, EDGES * 4
    with ActivationMeter() as meter:
        out = spmm(edge_index, x, NUM_NODES, weight, config=CompressionConfig())
    assert meter.total_bytes == x_bytes + weight_bytes + edge_index.numel() * 8  # int64 view, once
    with ActivationMeter() as meter:
        out = spmm(edge_index, x, NUM_NODES, weight, config=CompressionConfig(bits=2))
    compressed = meter.total_bytes
    assert compressed < (x_bytes + weight_bytes) / 8 + edge_index.numel()  # uint8: < 256 nodes
    with ActivationMeter() as meter:  # constant weights: only indices and the weights themselves
        out = spmm(edge_index, x, NUM_NODES, weight.detach(), config=CompressionConfig(bits=2))
    assert meter.total_bytes == weight_bytes + edge_index.numel()
    assert out.requires_grad  # the graph (and what it saved) was alive when the block ended


def test_bad_arguments_raise_one_clear_line():
    edge_index, x, weight = make_graph()
    config = CompressionConfig()
    with pytest.raises(ValueError, match=r"shape \[2, E\]"):
        spmm(edge_index.t(), x, NUM_NODES, config=config)
    with pytest.raises(ValueError, match="reduce"):
        spmm(edge_index, x, NUM_NODES, config=config, reduce="max")
    with pytest.raises(ValueError, match="edge_weight"):
        spmm(edge_index, x, NUM_NODES, weight[:-1], config=config)
    with pytest.raises(ValueError, match="integer dtype"):
        spmm(edge_index.float(), x, NUM_NODES, config=config)
    for bits in (32, 2):
        with pytest.raises(ValueError, match="node id outside"):
            spmm(edge_index, x, NUM_NODES - 5, config=CompressionConfig(bits=bits))
        with pytest.raises(ValueError, match="node id outside"):
            spmm(edge_index, x[:10], NUM_NODES, config=CompressionConfig(bits=bits))


@pytest.mark.parametrize("bits", [32, 2])
def test_operands_with_more_dims_aggregate_per_feature(bits, grad_tools):
    edge_index, x, weight = make_graph()
    heads = x.detach().reshape(NUM_SRC, 3, 11).requires_grad_()  # e.g. per-head features
    op = lambda x, w: spmm(edge_index, x, NUM_NODES, w, config=CompressionConfig(bits=bits))  # noqa: E731
    out = op(heads, weight)
    flat = spmm(edge_index, x.detach(), NUM_NODES, weight.detach(), config=CompressionConfig())
    assert torch.equal(out.reshape(NUM_NODES, -1), flat)
    probe = torch.randn(NUM_NODES, 3, 11)
    torch.manual_seed(0)
    grad_x, grad_w = grad_tools.gradients(op, (heads, weight), probe)
    assert grad_x.shape == heads.shape and grad_w.shape == weight.shape
