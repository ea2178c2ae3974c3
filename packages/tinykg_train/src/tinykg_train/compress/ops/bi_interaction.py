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

from tinykg_kernels.leaky_pair import (
    leaky_relu_pair,
    leaky_relu_pair_backward,
    leaky_relu_pair_backward_rows,
)
from tinykg_train.compress.blocks import MIN_MATMUL_ROWS, device_budget, spans
from tinykg_train.compress.codec import compress, decompress
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.masks import PlaneMask
from tinykg_train.compress.saving import apply_compressed, load, save


def _plain(ego, neighbors, sum_weight, sum_bias, product_weight, product_bias, slope):
    summed = F.linear(ego + neighbors, sum_weight, sum_bias)
    product = F.linear(ego * neighbors, product_weight, product_bias)
    return F.leaky_relu(summed, slope) + F.leaky_relu(product, slope)


class _NeighborRows:
    """Rows of the neighbor vectors in backward: sliced from the decoded stored ones, or recomputed
    from the decoded sources (the ego vectors, or a sampled block's sources) with `neighbors_of`.

    Recomputed all at once (one sparse product) unless there is more than one block, they would
    take more than `whole_bytes`, and `neighbors_of` has `rows(x, start, stop)`: then one block of
    rows at a time, each time a block is used (three passes over the graph instead of one: worth it
    only when the whole tensor is what a step's peak cannot afford)."""

    def __init__(
        self, sources, stored, neighbors_of, width: int, blocked: bool, whole_bytes: int
    ) -> None:
        self.sources, self.whole, self.neighbors_of = sources, None, neighbors_of
        rows_bytes = sources.shape[0] * width * sources.element_size()
        if neighbors_of is None:
            self.whole = decompress(stored).reshape(-1, width)
        elif not (blocked and rows_bytes > whole_bytes and hasattr(neighbors_of, "rows")):
            with torch.no_grad():
                self.whole = neighbors_of(sources).reshape(-1, width)

    def __call__(self, start: int, stop: int) -> torch.Tensor:
        if self.whole is not None:
            return self.whole[start:stop]
        return self.neighbors_of.rows(self.sources, start, stop)


def _input_grads_whole(
    grad, masks, slope, sum_weight, product_weight, ego, neighbors, blocks, needs
):
    """The gradients of ego and neighbors in one block: each whole temporary dropped once used."""
    grad_sum, grad_product = leaky_relu_pair_backward(grad, *masks, slope)
    through_sum = grad_sum.matmul(sum_weight)
    del grad_sum
    through_product = grad_product.matmul(product_weight)
    del grad_product
    grad_neighbors = torch.addcmul(through_sum, through_product, ego) if needs[1] else None
    grad_ego = (
        through_sum.addcmul_(through_product, neighbors(0, ego.shape[0])) if needs[0] else None
    )
    return grad_ego, grad_neighbors


def _input_grads_blocked(
    grad, masks, slope, sum_weight, product_weight, ego, neighbors, blocks, needs
):
    """The same gradients, written a block of rows at a time (the same bits: every step is
    row-wise, the matrix products on blocks of at least `MIN_MATMUL_ROWS` rows)."""
    grad_ego = torch.empty_like(ego) if needs[0] else None
    grad_neighbors = torch.empty_like(ego) if needs[1] else None
    numel, out_width = grad.numel(), grad.shape[-1]
    for a, b in blocks:
        grad_sum, grad_product = leaky_relu_pair_backward_rows(
            grad[a:b], *masks, a * out_width, numel, slope
        )
        through_sum = grad_sum.matmul(sum_weight)
        del grad_sum
        through_product = grad_product.matmul(product_weight)
        del grad_product
        if needs[1]:
            torch.addcmul(through_sum, through_product, ego[a:b], out=grad_neighbors[a:b])
        if needs[0]:
            torch.addcmul(through_sum, through_product, neighbors(a, b), out=grad_ego[a:b])
    return grad_ego, grad_neighbors


def _rebuilt_inputs(ego, neighbors: _NeighborRows, blocks, combine) -> torch.Tensor:
    """`combine(ego, neighbors)` ([rows, width]), filled a block of rows at a time."""
    out = torch.empty_like(ego)
    for a, b in blocks:
        combine(ego[a:b], neighbors(a, b), out=out[a:b])
    return out


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
        block_bytes: int | None,
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
        ctx.block_bytes = block_bytes
        ctx.num_targets = None if sources is None else ego.shape[0]
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        # This backward runs on whole-graph tensors: its peak (not the bytes saved) bounds a
        # step's memory. The weight and bias gradients are sums over all rows, each taken in one
        # product as ever; everything else is done a block of rows at a time (compress.blocks),
        # so of [rows, width] it holds the incoming gradient, the decoded ego vectors, one rebuilt
        # input or the two gradients it returns, and one masked gradient while the weights'.
        stored_ego, stored_neighbors, sum_positive, product_positive, sum_weight, product_weight = (
            load(ctx, decode=False)
        )
        needs = ctx.needs_input_grad
        width, out_width = ctx.shape[-1], grad.shape[-1]
        sources = decompress(stored_ego).reshape(-1, width)  # the ego vectors, or a block's sources
        ego = sources if ctx.num_targets is None else sources[: ctx.num_targets]
        grad = grad.reshape(-1, out_width)
        masks, slope = (sum_positive.packed, product_positive.packed), ctx.slope
        row_bytes = 3 * (width + out_width) * grad.element_size()
        budget = device_budget(ctx.block_bytes, grad.device, ego.shape[0] * row_bytes)
        blocks = list(spans(ego.shape[0], row_bytes, budget, MIN_MATMUL_ROWS))
        neighbors = _NeighborRows(
            sources, stored_neighbors, ctx.neighbors_of, width, len(blocks) > 1, budget
        )
        grad_sum_weight = grad_sum_bias = grad_product_weight = grad_product_bias = None
        for which, combine, (weight_needed, bias_needed) in (
            (0, torch.add, needs[2:4]),
            (1, torch.mul, needs[4:6]),
        ):
            if not (weight_needed or bias_needed):
                continue
            want = (which == 0, which == 1)
            masked = leaky_relu_pair_backward(grad, *masks, slope, want=want)[which]
            if weight_needed:
                inputs = _rebuilt_inputs(ego, neighbors, blocks, combine)
                weight_grad = masked.t().matmul(inputs)
                del inputs
            bias_grad = masked.sum(dim=0) if bias_needed else None
            del masked
            if which == 0:
                grad_sum_weight = weight_grad if weight_needed else None
                grad_sum_bias = bias_grad
            else:
                grad_product_weight = weight_grad if weight_needed else None
                grad_product_bias = bias_grad
        grad_ego = grad_neighbors = None
        if needs[0] or needs[1]:
            through = _input_grads_whole if len(blocks) == 1 else _input_grads_blocked
            grad_ego, grad_neighbors = through(
                grad, masks, slope, sum_weight, product_weight, ego, neighbors, blocks, needs
            )
        return (
            None if grad_ego is None else grad_ego.view(ctx.shape),
            None if grad_neighbors is None else grad_neighbors.view(ctx.shape),
            grad_sum_weight,
            grad_sum_bias,
            grad_product_weight,
            grad_product_bias,
            None,
            None,
            None,
            None,
            None,
        )


#: Floats of one row of `bi_interaction_rows`' block temporaries, per input and output width: the
#: neighbor rows and `ego * neighbors` (inputs), both pre-activations and two LeakyReLUs (outputs).
_INFERENCE_TEMPORARIES = (2, 4)


@torch.no_grad()
def bi_interaction_rows(
    ego: torch.Tensor,
    neighbors_of: Any,
    sum_weight: torch.Tensor,
    sum_bias: torch.Tensor | None,
    product_weight: torch.Tensor,
    product_bias: torch.Tensor | None,
    negative_slope: float = 0.2,
    *,
    block_bytes: int | None = None,
) -> torch.Tensor:
    """`bi_interaction(ego, neighbors_of(ego), ...)` without gradient (scoring), computed a block
    of rows at a time: the neighbor vectors (`neighbors_of.rows(ego, start, stop)`), `ego *
    neighbors` and the two pre-activations are never whole-graph tensors. Of `[nodes, width]` it
    holds `ego` and the output; the whole forward held five. On the CPU the same bits as the
    whole op (row-wise steps; matrix products on blocks of at least `MIN_MATMUL_ROWS` rows)."""
    rows, width = ego.shape
    out_width = sum_weight.shape[0]
    per_input, per_output = _INFERENCE_TEMPORARIES
    row_bytes = (per_input * width + per_output * out_width) * ego.element_size()
    budget = device_budget(block_bytes, ego.device, rows * row_bytes)
    out = ego.new_empty(rows, out_width)
    slope = float(negative_slope)
    for a, b in spans(rows, row_bytes, budget, MIN_MATMUL_ROWS):
        block = ego[a:b]
        neighbors = neighbors_of.rows(ego, a, b)
        out[a:b] = _plain(
            block, neighbors, sum_weight, sum_bias, product_weight, product_bias, slope
        )
    return out


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
    block_bytes: int | None = None,
    sources: torch.Tensor | None = None,
) -> torch.Tensor:
    """`LeakyReLU(W1 (ego + neighbors) + b1) + LeakyReLU(W2 (ego * neighbors) + b2)`; with
    `config.bits < 32` only the two factors (compressed) and two 1-bit masks are saved.

    `neighbors_of`: the linear map with `neighbors == neighbors_of(ego)`, unchanged until backward
    (KGAT's attention-weighted propagation): then only `ego` is saved, and backward recomputes the
    neighbors from it (a block of rows at a time when it has `rows(x, start, stop)`).
    `block_bytes` bounds the backward's per-block temporaries (default `compress.blocks`'s budget,
    grown on a GPU to at most `CUDA_MAX_BLOCKS` blocks).

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
        CompressedBiInteraction,
        *args,
        float(negative_slope),
        config,
        neighbors_of,
        block_bytes,
        sources,
    )
