"""`relational_mean`: KGIN's aggregation `out[h] = mean over (h, r, t) of w_r * x_t`, fused.

Written with `ops.embedding` + `ops.mul` + a scatter, autograd keeps two `[E, dim]` tensors per hop
(the gathered neighbors and relation rows; 4x more than the `[N, dim]` features on lfm1m's KG). This
Function saves only the features `x` (compressed per `config`, and only when the relation weights
need a gradient), the relation table (a parameter) and the three index rows; the backward gathers
the per-edge rows again. Same arithmetic as the unfused version, so the forward is identical.
"""

from __future__ import annotations

from typing import Any

import torch

from tinykg_train.compress import CompressionConfig
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
        messages = x.index_select(0, source) * relation_weight.index_select(0, relation)
        out = x.new_zeros((num_nodes, x.shape[1])).index_add_(0, target, messages)
        return out / _in_degree(target, num_nodes, out.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, relation_weight, source, target, relation = load(ctx)
        source, target, relation = (widen_index(i) for i in (source, target, relation))
        x_shape, weight_shape, num_nodes = ctx.shapes
        edge_grad = (grad / _in_degree(target, num_nodes, grad.dtype)).index_select(0, target)
        grad_x = grad_weight = None
        if ctx.needs_input_grad[0]:
            messages = edge_grad * relation_weight.index_select(0, relation)
            grad_x = grad.new_zeros(x_shape).index_add_(0, source, messages)
        if ctx.needs_input_grad[1]:
            messages = edge_grad * x.index_select(0, source)
            grad_weight = grad.new_zeros(weight_shape).index_add_(0, relation, messages)
        return grad_x, grad_weight, None, None, None, None, None


def relational_mean(
    x: torch.Tensor,
    relation_weight: torch.Tensor,
    edge_index: torch.Tensor,
    relation: torch.Tensor,
    num_nodes: int,
    *,
    config: CompressionConfig,
) -> torch.Tensor:
    """`out[h] = mean over edges (t -> h, relation r) of relation_weight[r] * x[t]`; 0 without edges.

    `x [N_src, dim]`, `relation_weight [R, dim]`, `edge_index [2, E]` (row 0 source `t`, row 1
    target `h`), `relation [E]`; returns `[num_nodes, dim]`.
    """
    check_index("edge_index", edge_index)
    check_index("relation", relation)
    source, target = edge_index[0], edge_index[1]
    args = (x, relation_weight, source, target, relation, num_nodes, config)
    if not config.enabled:
        return RelationalMean.apply(*args)
    return apply_compressed(RelationalMean, *args)
