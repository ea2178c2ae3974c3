"""`propagated_bi_interaction`: a whole-graph KGAT layer's propagation and aggregator as one op,
done a block of rows at a time in forward and in backward.

    n = A e          out = LeakyReLU(W1 (e + n) + b1) + LeakyReLU(W2 (e * n) + b2)

As two ops (`CSRGraph`'s product, then `bi_interaction`) a compressed step holds whole-graph
tensors for n, both pre-activations and e * n beside the output in forward, and in backward the
gradients of e and of n beside the transposed product's result: on a 10M-triple graph those two
nodes set the INT2 step's peak (`benchmarks.peak_by_node`). Here n only ever exists a block of rows
at a time. Forward: each block's neighbor rows (`propagation.rows(e, a, b)`), its output rows and
its two 1-bit LeakyReLU masks. Backward: each block's neighbor rows rebuilt from the stored e (one
pass over the graph in all), the block's share of the weight and bias gradients, its gradient of e
directly, and its gradient of n pushed back through A into e's (`propagation.add_transposed_rows`).
Of `[nodes, width]` tensors the forward holds e and the output; the backward the incoming
gradient and e's gradient, and e decoded whole only when the layer is one block (else each block
decodes the rows it reads: `_row_reader`).

Saved: e, compressed as `bi_interaction` stores it (the table as it is in the first layer, the
previous layer's normalized output after), and the masks of each block. The forward gives the two
ops' values bit for bit. Backward sums over rows (weight and bias gradients, A^T's product) are
taken block by block: with one block they are the two ops' bits, with more they differ by float32
rounding only.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.nn.functional as F

from tinykg_kernels.leaky_pair import leaky_relu_pair, leaky_relu_pair_backward
from tinykg_train.compress.blocks import MIN_MATMUL_ROWS, device_budget, spans
from tinykg_train.compress.codec import Compressed, Rescaled, compress, decompress
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.masks import PlaneMask
from tinykg_train.compress.ops.bi_interaction import _plain
from tinykg_train.compress.saving import apply_compressed, load, save


class Propagation(Protocol):
    """A fixed linear map `A` over a graph's nodes, read a block of rows at a time."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """`A @ x`, differentiable in x (the uncompressed path)."""

    def rows(self, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """Rows `start:stop` of `A @ x` (no gradient)."""

    def gathered_rows(
        self, rows_of, start: int, stop: int, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Rows `start:stop` of `A @ x`, x read only at the rows they use: `rows_of(sorted ids)`
        (no gradient; `positions` a scratch `[nodes]` int buffer, as `CSRGraph.gathered_rows`)."""

    def add_transposed_rows(
        self, x: torch.Tensor, start: int, stop: int, out: torch.Tensor
    ) -> torch.Tensor:
        """`out += A[start:stop]^T @ x` in place."""


def _row_bytes(width: int, out_width: int, element_size: int) -> int:
    """Bytes of one row of a block's temporaries: in backward the neighbor rows, an input
    rebuilt from them, the two matrix products into `width` and the gradient of the neighbors;
    both pre-activations' gradients and one spare output row (more than the forward's)."""
    return (5 * width + 3 * out_width) * element_size


def _row_reader(stored: Any, blocks: int):
    """`ids -> rows` of a stored ego that a backward of several blocks reads block by block
    (`take_rows` of a `Compressed`, or of the `Rescaled` form a normalized layer output takes),
    or None where it is decoded whole: one block (a small graph: one decode beats one per
    block), a plain tensor (the first layer's table, stored as it is), or codes that cannot be
    read by rows.

    Decoded whole, the ego is one more `[nodes, width]` float32 tensor beside the incoming
    gradient and the ego's gradient: on `bench_scale`'s 10M graph it set the INT2 step's peak
    in the second layer's backward, 909 MiB above the step's start; read by rows, the peak is
    736 MiB, in the first layer's backward (profiled with `torch.autograd.profiler`, as
    `benchmarks.peak_by_node` does). A source row is then decoded once for each block that
    reads it (about ten times over on that graph), the price of not holding it: a CF step took
    1.11x the whole decode's time there, 1.08x at 1M (one thread, the two taking turns)."""
    if blocks < 2 or not isinstance(stored, Compressed | Rescaled) or not stored.by_rows:
        return None
    return stored.take_rows


def _added(total: torch.Tensor | None, part: torch.Tensor) -> torch.Tensor:
    """A sum over blocks: the first block's part as it is (one block: the whole sum's bits)."""
    return part if total is None else total.add_(part)


class PropagatedBiInteraction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        ego: torch.Tensor,
        sum_weight: torch.Tensor,
        sum_bias: torch.Tensor | None,
        product_weight: torch.Tensor,
        product_bias: torch.Tensor | None,
        propagation: Propagation,
        slope: float,
        config: CompressionConfig,
        block_bytes: int | None,
    ) -> torch.Tensor:
        rows, out_width = ego.shape[0], sum_weight.shape[0]
        row_bytes = _row_bytes(ego.shape[1], out_width, ego.element_size())
        budget = device_budget(block_bytes, ego.device, rows * row_bytes)
        blocks = list(spans(rows, row_bytes, budget, MIN_MATMUL_ROWS))
        out = ego.new_empty(rows, out_width)
        sum_masks, product_masks = [], []
        for a, b in blocks:
            block, neighbors = ego[a:b], propagation.rows(ego, a, b)
            summed = F.linear(block + neighbors, sum_weight, sum_bias)
            product = F.linear(block * neighbors, product_weight, product_bias)
            del neighbors
            out[a:b], sum_positive, product_positive = leaky_relu_pair(summed, product, slope)
            sum_masks.append(PlaneMask(sum_positive, summed.shape))
            product_masks.append(PlaneMask(product_positive, product.shape))
        save(ctx, compress(ego, config), *sum_masks, *product_masks, sum_weight, product_weight)
        ctx.blocks, ctx.propagation, ctx.slope = blocks, propagation, slope
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = load(ctx, decode=False)
        count = len(ctx.blocks)
        stored_ego, sum_weight, product_weight = saved[0], saved[-2], saved[-1]
        sum_masks, product_masks = saved[1 : 1 + count], saved[1 + count : 1 + 2 * count]
        needs = ctx.needs_input_grad
        propagation = ctx.propagation
        rows_of = _row_reader(stored_ego, count)
        if rows_of is None:
            ego = decompress(stored_ego)
            shape, like = ego.shape, ego
        else:  # never decoded whole: each block reads the rows it touches
            ego = None
            shape, like = (grad.shape[0], sum_weight.shape[1]), grad
            # the blocks' scratch, at the CSR's int32 columns (a graph of 2**31 nodes or more,
            # whose columns are int64, gets one per block from `gathered_rows` instead)
            positions = torch.empty(shape[0], dtype=torch.int32, device=grad.device)
        grad = grad.contiguous()
        grad_ego = like.new_zeros(shape) if needs[0] else None
        grad_sum_weight = grad_sum_bias = grad_product_weight = grad_product_bias = None
        for (a, b), sum_mask, product_mask in zip(
            ctx.blocks, sum_masks, product_masks, strict=True
        ):
            grad_sum, grad_product = leaky_relu_pair_backward(
                grad[a:b], sum_mask.packed, product_mask.packed, ctx.slope
            )
            if ego is not None:
                block, neighbors = ego[a:b], propagation.rows(ego, a, b)
            else:
                block = stored_ego.rows(a, b)
                neighbors = propagation.gathered_rows(rows_of, a, b, positions)
            if needs[1]:
                grad_sum_weight = _added(grad_sum_weight, grad_sum.t().matmul(block + neighbors))
            if needs[2]:
                grad_sum_bias = _added(grad_sum_bias, grad_sum.sum(dim=0))
            if needs[3]:
                product_part = grad_product.t().matmul(block * neighbors)
                grad_product_weight = _added(grad_product_weight, product_part)
            if needs[4]:
                grad_product_bias = _added(grad_product_bias, grad_product.sum(dim=0))
            if grad_ego is None:
                continue
            through_sum = grad_sum.matmul(sum_weight)
            del grad_sum
            through_product = grad_product.matmul(product_weight)
            del grad_product
            # the neighbors' gradient first, so that one block adds A^T's product and then the
            # direct part, as autograd summed the two ops' gradients
            grad_neighbors = torch.addcmul(through_sum, through_product, block)
            propagation.add_transposed_rows(grad_neighbors, a, b, grad_ego)
            del grad_neighbors
            grad_ego[a:b] += through_sum.addcmul_(through_product, neighbors)
        weight_grads = (grad_sum_weight, grad_sum_bias, grad_product_weight, grad_product_bias)
        return (grad_ego, *weight_grads, None, None, None, None)


def propagated_bi_interaction(
    ego: torch.Tensor,
    propagation: Propagation,
    sum_weight: torch.Tensor,
    sum_bias: torch.Tensor | None,
    product_weight: torch.Tensor,
    product_bias: torch.Tensor | None,
    negative_slope: float = 0.2,
    *,
    config: CompressionConfig,
    block_bytes: int | None = None,
) -> torch.Tensor:
    """`bi_interaction(ego, A @ ego, ...)` for `ego [nodes, width]` and the fixed map `A` of
    `propagation`, never holding `A @ ego` whole (see the module). `block_bytes` bounds a block's
    temporaries (default `compress.blocks`'s budget; on a GPU at most `CUDA_MAX_BLOCKS` blocks).
    With `config.bits == 32` (nothing compressed) it is the plain ops' autograd."""
    if ego.dim() != 2:
        raise ValueError(
            f"propagated_bi_interaction needs ego vectors [nodes, width] (got {tuple(ego.shape)})"
        )
    args = (sum_weight, sum_bias, product_weight, product_bias)
    if not config.enabled:
        return _plain(ego, propagation(ego), *args, float(negative_slope))
    return apply_compressed(
        PropagatedBiInteraction,
        ego,
        *args,
        propagation,
        float(negative_slope),
        config,
        block_bytes,
    )
