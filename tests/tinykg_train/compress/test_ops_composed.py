"""The ops composed into one KGAT-like layer (attention, edge softmax, spmm, bi-interaction,
LeakyReLU, dropout, L2 norm), as models use them: exact forward, 8-bit gradients within 2% and
2-bit gradients unbiased for the whole layer's parameters."""

import pytest
import torch
import torch.nn.functional as F

from tinykg_train.compress import ActivationMeter, CompressionConfig, compress_saved_tensors, ops

NODES, EDGES, DIM, OUT = 120, 600, 64, 32


def make_graph(device: str = "cpu"):
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, NODES, (2, EDGES), generator=gen)
    params = {
        "table": torch.randn(NODES, DIM, generator=gen),
        "attention": torch.randn(2, DIM, generator=gen) / 8,
        "w_sum": torch.randn(OUT, DIM, generator=gen) / 8,
        "w_bi": torch.randn(OUT, DIM, generator=gen) / 8,
    }
    params = {k: v.to(device).requires_grad_() for k, v in params.items()}
    return edge_index.to(device), params


def layer(edge_index, params, config, dropout=0.0):
    src, dst = edge_index
    h = ops.embedding(params["table"], torch.arange(NODES, device=edge_index.device), config=config)
    halves = ops.linear(h, params["attention"], config=config)
    scores = (
        ops.embedding(halves, src, config=config)[:, 0]
        + ops.embedding(halves, dst, config=config)[:, 1]
    )
    alpha = ops.edge_softmax(ops.leaky_relu(scores, 0.2, config=config), dst, NODES, config=config)
    agg = ops.spmm(edge_index, h, NODES, alpha, config=config)
    summed = ops.leaky_relu(ops.linear(h + agg, params["w_sum"], config=config), config=config)
    bi = ops.leaky_relu(
        ops.linear(ops.mul(h, agg, config=config), params["w_bi"], config=config), config=config
    )
    out = ops.dropout(summed + bi, dropout, dropout > 0, config=config)
    return ops.l2_normalize(out, config=config)


def plain_layer(edge_index, params):
    """The same layer in plain torch ops (PyG-style gather/scatter)."""
    src, dst = edge_index
    h = params["table"]
    halves = F.linear(h, params["attention"])
    scores = F.leaky_relu(halves[src, 0] + halves[dst, 1], 0.2)
    exp = (scores - scores.max()).exp()
    alpha = exp / torch.zeros(NODES, device=h.device).index_add(0, dst, exp)[dst]
    agg = torch.zeros_like(h).index_add(0, dst, alpha[:, None] * h[src])
    summed = F.leaky_relu(F.linear(h + agg, params["w_sum"]))
    bi = F.leaky_relu(F.linear(h * agg, params["w_bi"]))
    return F.normalize(summed + bi, dim=-1)


def gradients(edge_index, params, config, probe):
    out = layer(edge_index, params, config)
    return torch.autograd.grad((out * probe).sum(), list(params.values()))


@pytest.mark.parametrize("bits", [32, 8, 2, 1])
def test_forward_is_the_same_at_every_bit_width_and_matches_plain_torch(bits):
    edge_index, params = make_graph()
    exact = layer(edge_index, params, CompressionConfig())
    assert torch.equal(layer(edge_index, params, CompressionConfig(bits=bits)), exact)
    torch.testing.assert_close(exact, plain_layer(edge_index, params), rtol=1e-4, atol=1e-5)


def test_parameter_gradients_at_8_bits_within_two_percent():
    """Each op alone stays within 1% at 8 bits (tests/.../ops); through six of them, gradients that
    sum many products of mixed sign (here the attention vector's: ~1.4%) gather a little more."""
    edge_index, params = make_graph()
    probe = torch.randn(NODES, OUT, generator=torch.Generator().manual_seed(1))
    exact = gradients(edge_index, params, CompressionConfig(), probe)
    torch.manual_seed(0)
    approx = gradients(edge_index, params, CompressionConfig(bits=8), probe)
    for name, a, e in zip(params, approx, exact, strict=True):
        assert (a - e).norm() / e.norm() < 0.02, name


def test_parameter_gradients_at_2_bits_average_to_exact_and_round_to_nearest_does_not():
    edge_index, params = make_graph()
    probe = torch.randn(NODES, OUT, generator=torch.Generator().manual_seed(1))
    exact = torch.cat(
        [g.reshape(-1) for g in gradients(edge_index, params, CompressionConfig(), probe)]
    )
    gains = {}
    for stochastic in (True, False):
        config = CompressionConfig(bits=2, stochastic=stochastic)
        samples = []
        for seed in range(48):
            torch.manual_seed(seed)
            samples.append(
                torch.cat([g.reshape(-1) for g in gradients(edge_index, params, config, probe)])
            )
        single = sum((s - exact).norm() for s in samples) / len(samples)
        gains[stochastic] = float((torch.stack(samples).mean(0) - exact).norm() / single)
    assert gains[True] < 0.3, gains  # ~1/sqrt(48), plus the small O(variance) softmax/norm terms
    assert gains[False] > 0.9, gains


def test_hooks_add_nothing_to_what_the_ops_store():
    edge_index, params = make_graph()
    config = CompressionConfig(bits=2)
    held = []
    for hooks in (False, True):
        with ActivationMeter() as meter:
            if hooks:
                with compress_saved_tensors(config):
                    out = layer(edge_index, params, config, dropout=0.1)
            else:
                out = layer(edge_index, params, config, dropout=0.1)
        held.append(meter.total_bytes)
        assert out.requires_grad
    assert held[0] == held[1]


@pytest.mark.cuda
def test_on_cuda_forward_matches_cpu_and_8_bit_gradients_within_two_percent():
    edge_index, params = make_graph("cuda")
    probe = torch.randn(NODES, OUT, generator=torch.Generator().manual_seed(1)).cuda()
    exact = gradients(edge_index, params, CompressionConfig(), probe)
    torch.manual_seed(0)
    with compress_saved_tensors(CompressionConfig(bits=8)), ActivationMeter() as meter:
        out = layer(edge_index, params, CompressionConfig(bits=8))
    # CUDA's sparse products add with atomics, so even two uncompressed forwards can differ in the
    # last bit: the same forward, up to float32 summation order (the CPU tests check bit equality)
    torch.testing.assert_close(
        out, layer(edge_index, params, CompressionConfig()), rtol=1e-6, atol=1e-7
    )
    assert meter.total_bytes > 0
    approx = torch.autograd.grad((out * probe).sum(), list(params.values()))
    for name, a, e in zip(params, approx, exact, strict=True):
        assert (a - e).norm() / e.norm() < 0.02, name
    cpu_edges, cpu_params = make_graph()
    torch.testing.assert_close(
        out.cpu(), layer(cpu_edges, cpu_params, CompressionConfig()), rtol=1e-4, atol=1e-5
    )
