"""`bi_interaction`: KGAT's aggregator, saving its two factors instead of four activations.

    out = LeakyReLU(W1 (e + n) + b1) + LeakyReLU(W2 (e * n) + b2)      (Wang et al. 2019, eq. 8)

Built from `linear`, `mul` and `leaky_relu`, a step would store e, n, e + n and e * n: four
quantized copies of [nodes, dim] per layer. Every one of them is a function of e and n, so this
Function saves only those two (compressed; e is often stored already: the embedding table in the
first layer, which is kept as it is, then the previous layer's output, which its L2 normalization
holds) and the two 1-bit LeakyReLU masks (written with the output in one fused pass,
`tinykg_kernels.leaky_pair`), and rebuilds e + n and e * n from the decoded factors in
backward. The weight gradients stay unbiased: e + n is linear in the factors, and e * n is a
product of two independently rounded factors. The forward is the plain ops', bit for bit.

KGAT's n is itself a linear function of e (the attention-weighted sum over each node's neighbors,
the attention fixed during the step): given that function (`neighbors_of`), n is not stored at all
but recomputed from the decoded e in backward with one sparse product, in place of a quantized
copy and its dequantization. e * n then multiplies two functions
of one rounded e; it stays unbiased when no node is its own neighbor (the rounding of different
elements is independent), and a self-loop adds a bias of the order of that element's rounding
variance.

In a sampled step's layer block (`models.layers.BiInteractionLayer` with `num_targets`) the
neighbors come from more nodes than get an output: the ego vectors are the first rows of the
block's sources, and the neighbors a linear function of all of them. Given those `sources`, the
Function stores them (usually held already: the previous layer's output, kept by its L2
normalization, or the table rows of the first layer) in place of the ego vectors, and recomputes
both factors from them in backward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from tinykg_kernels.leaky_pair import leaky_relu_pair, leaky_relu_pair_backward
from tinykg_train.compress.codec import compress, decompress
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.masks import PlaneMask
from tinykg_train.compress.saving import apply_compressed, load, save


def _plain(ego, neighbors, sum_weight, sum_bias, product_weight, product_bias, slope):
    summed = F.linear(ego + neighbors, sum_weight, sum_bias)
    product = F.linear(ego * neighbors, product_weight, product_bias)
    return F.leaky_relu(summed, slope) + F.leaky_relu(product, slope)


def _decoded_factors(
    ego, neighbors, neighbors_of, num_targets=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stored ego vectors decoded and the neighbors decoded, or recomputed from them with
    `neighbors_of`; both as [rows, width]. With `num_targets`, what was stored is the sources:
    the ego vectors are their first `num_targets` rows, the neighbors are recomputed from all."""
    ego = decompress(ego)
    if neighbors_of is None:
        neighbors = decompress(neighbors)
    else:
        with torch.no_grad():
            neighbors = neighbors_of(ego)
    if num_targets is not None:
        ego = ego[:num_targets]
    width = ego.shape[-1]
    return ego.reshape(-1, width), neighbors.reshape(-1, width)


class CompressedBiInteraction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        ego: torch.Tensor,
        neighbors: torch.Tensor,
        sum_weight: torch.Tensor,
        sum_bias: torch.Tensor | None,
        product_weight: torch.Tensor,
        product_bias: torch.Tensor | None,
        slope: float,
        config: CompressionConfig,
        neighbors_of: Callable[[torch.Tensor], torch.Tensor] | None,
        sources: torch.Tensor | None = None,
    ) -> torch.Tensor:
        summed = F.linear(ego + neighbors, sum_weight, sum_bias)
        product = F.linear(ego * neighbors, product_weight, product_bias)
        # the two LeakyReLUs, their sum and both sign masks in one fused pass
        out, sum_positive, product_positive = leaky_relu_pair(summed, product, slope)
        save(
            ctx,
            compress(ego if sources is None else sources, config),
            compress(neighbors, config) if neighbors_of is None else None,
            PlaneMask(sum_positive, summed.shape),
            PlaneMask(product_positive, product.shape),
            sum_weight,
            product_weight,
        )
        ctx.slope, ctx.shape, ctx.neighbors_of = slope, ego.shape, neighbors_of
        ctx.num_targets = None if sources is None else ego.shape[0]
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        # Each [rows, width] temporary is dropped as soon as it is used: this backward runs on
        # whole-graph tensors, and its peak (not the bytes saved) bounds a step's memory.
        ego, neighbors, sum_positive, product_positive, sum_weight, product_weight = load(
            ctx, decode=False
        )
        ego, neighbors = _decoded_factors(ego, neighbors, ctx.neighbors_of, ctx.num_targets)
        needs = ctx.needs_input_grad
        grad = grad.reshape(-1, grad.shape[-1])
        grad_sum, grad_product = leaky_relu_pair_backward(
            grad, sum_positive.packed, product_positive.packed, ctx.slope
        )
        grad_sum_weight = grad_sum_bias = grad_product_weight = grad_product_bias = None
        if needs[2] or needs[4]:
            inputs = torch.add(ego, neighbors)  # one buffer for both rebuilt inputs
            if needs[2]:
                grad_sum_weight = grad_sum.t().matmul(inputs)
            if needs[4]:
                grad_product_weight = grad_product.t().matmul(torch.mul(ego, neighbors, out=inputs))
            del inputs
        if needs[3]:
            grad_sum_bias = grad_sum.sum(dim=0)
        if needs[5]:
            grad_product_bias = grad_product.sum(dim=0)
        grad_ego = grad_neighbors = None
        if needs[0] or needs[1]:
            through_sum = grad_sum.matmul(sum_weight)
            del grad_sum
            through_product = grad_product.matmul(product_weight)
            del grad_product
            if needs[1]:
                grad_neighbors = torch.addcmul(through_sum, through_product, ego).view(ctx.shape)
            del ego
            if needs[0]:
                grad_ego = through_sum.addcmul_(through_product, neighbors).view(ctx.shape)
        return (
            grad_ego,
            grad_neighbors,
            grad_sum_weight,
            grad_sum_bias,
            grad_product_weight,
            grad_product_bias,
            None,
            None,
            None,
            None,
        )


def bi_interaction(
    ego: torch.Tensor,
    neighbors: torch.Tensor,
    sum_weight: torch.Tensor,
    sum_bias: torch.Tensor | None,
    product_weight: torch.Tensor,
    product_bias: torch.Tensor | None,
    negative_slope: float = 0.2,
    *,
    config: CompressionConfig,
    neighbors_of: Callable[[torch.Tensor], torch.Tensor] | None = None,
    sources: torch.Tensor | None = None,
) -> torch.Tensor:
    """`LeakyReLU(W1 (ego + neighbors) + b1) + LeakyReLU(W2 (ego * neighbors) + b2)`; with
    `config.bits < 32` only the two factors (compressed) and two 1-bit masks are saved.

    `neighbors_of`: the linear map with `neighbors == neighbors_of(ego)`, unchanged until backward
    (KGAT's attention-weighted propagation): then only `ego` is saved, and backward recomputes the
    neighbors from it.

    `sources` (with `neighbors_of`): `ego` is `sources[:len(ego)]` and `neighbors ==
    neighbors_of(sources)` (a sampled layer block): `sources` is saved instead of `ego`."""
    args = (ego, neighbors, sum_weight, sum_bias, product_weight, product_bias)
    if ego.shape != neighbors.shape:
        raise ValueError(
            f"bi_interaction needs ego and neighbor vectors of one shape (got {tuple(ego.shape)} "
            f"and {tuple(neighbors.shape)})"
        )
    if sources is not None and neighbors_of is None:
        raise ValueError("bi_interaction's 'sources' needs 'neighbors_of' (neighbors from them)")
    if not config.enabled:
        return _plain(*args, float(negative_slope))
    return apply_compressed(
        CompressedBiInteraction, *args, float(negative_slope), config, neighbors_of, sources
    )
