"""`relational_mean`: KGIN's aggregation `out[h] = mean over (h, r, t) of w_r * x_t`, fused.

Written with `ops.embedding` + `ops.mul` + a scatter, autograd keeps two `[E, dim]` tensors per hop
(the gathered neighbors and relation rows; 4x more than the `[N, dim]` features on lfm1m's KG). This
Function saves only the features `x` (compressed per `config`, and only when the relation weights
need a gradient), the relation table (a parameter) and the three index rows; the backward gathers
the per-edge rows again. Same arithmetic as the unfused version, so the forward is identical.

The per-edge rows are built a block of edges at a time (`compress.blocks`, at most `block_bytes` of
[edges, dim] temporaries): one `index_add_` per block into the same output, in edge order, adds
into every row in the order one call over all edges does (on the CPU), so the forward and both
gradients are the same bits as unblocked.
"""

from __future__ import annotations

from typing import Any

import torch

from tinykg_train.compress import CompressionConfig
from tinykg_train.compress.blocks import spans
from tinykg_train.compress.codec import compress
from tinykg_train.compress.ops.indices import check_index, compact_index, widen_index
from tinykg_train.compress.saving import apply_compressed, load, save


def _in_degree(target: torch.Tensor, num_nodes: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.bincount(target, minlength=num_nodes).clamp_(min=1).to(dtype).unsqueeze(1)


class RelationalMean(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        relation_weight: torch.Tensor,
        source: torch.Tensor,
        target: torch.Tensor,
        relation: torch.Tensor,
        num_nodes: int,
        config: CompressionConfig,
        block_bytes: int | None,
    ) -> torch.Tensor:
        x_needs, weight_needs = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        save(
            ctx,
            compress(x, config) if weight_needs else None,
            relation_weight if x_needs else None,
            compact_index(source, x.shape[0]),
            compact_index(target, num_nodes),
            compact_index(relation, relation_weight.shape[0]),
        )
        ctx.shapes = (x.shape, relation_weight.shape, num_nodes)
        ctx.block_bytes = block_bytes
        out = x.new_zeros((num_nodes, x.shape[1]))
        for a, b in _edge_blocks(source, x, block_bytes):
            messages = x.index_select(0, source[a:b]) * relation_weight.index_select(0, relation[a:b])
            out.index_add_(0, target[a:b], messages)
            del messages
        return out.div_(_in_degree(target, num_nodes, out.dtype))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, relation_weight, source, target, relation = load(ctx)
        source, target, relation = (widen_index(i) for i in (source, target, relation))
        x_shape, weight_shape, num_nodes = ctx.shapes
        scaled = grad / _in_degree(target, num_nodes, grad.dtype)
        x_needs, weight_needs = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_x = grad.new_zeros(x_shape) if x_needs else None
        grad_weight = grad.new_zeros(weight_shape) if weight_needs else None
        for a, b in _edge_blocks(source, grad, ctx.block_bytes):
            edge_grad = scaled.index_select(0, target[a:b])
            if x_needs:
                messages = edge_grad * relation_weight.index_select(0, relation[a:b])
                grad_x.index_add_(0, source[a:b], messages)
                del messages
            if weight_needs:
                messages = edge_grad * x.index_select(0, source[a:b])
                grad_weight.index_add_(0, relation[a:b], messages)
                del messages
            del edge_grad
        return grad_x, grad_weight, None, None, None, None, None, None


def _edge_blocks(source: torch.Tensor, like: torch.Tensor, block_bytes: int | None):
    """Edge blocks whose [edges, dim] temporaries (about three at once) fit `block_bytes`."""
    return spans(source.shape[0], 3 * like.shape[1] * like.element_size(), block_bytes)


def relational_mean(
    x: torch.Tensor,
    relation_weight: torch.Tensor,
    edge_index: torch.Tensor,
    relation: torch.Tensor,
    num_nodes: int,
    *,
    config: CompressionConfig,
    block_bytes: int | None = None,
) -> torch.Tensor:
    """`out[h] = mean over edges (t -> h, relation r) of relation_weight[r] * x[t]`; 0 without edges.

    `x [N_src, dim]`, `relation_weight [R, dim]`, `edge_index [2, E]` (row 0 source `t`, row 1
    target `h`), `relation [E]`; returns `[num_nodes, dim]`. `block_bytes` bounds the per-edge
    temporaries (default `compress.blocks.BLOCK_BYTES`).
    """
    check_index("edge_index", edge_index)
    check_index("relation", relation)
    source, target = edge_index[0], edge_index[1]
    args = (x, relation_weight, source, target, relation, num_nodes, config, block_bytes)
    if not config.enabled:
        return RelationalMean.apply(*args)
    return apply_compressed(RelationalMean, *args)
