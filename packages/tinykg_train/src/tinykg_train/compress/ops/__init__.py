"""Autograd ops with an exact forward that save compressed activations for backward.

Every op takes `config=` (a `CompressionConfig`). With `config.bits == 32` the elementwise ops,
`linear`, `embedding`, `gather`, `score_margin`, `sum_of_squares`, `tanh`, `softmax`,
`l2_normalize`, `squared_distance`, `translation_scores`, `recomputed`, `bi_interaction` (KGAT's
aggregator, fused so that it saves only its two factors) and `propagated_bi_interaction` (a
whole-graph KGAT layer, propagation included, a block of rows at a time) are the plain torch ops; `spmm` and
`edge_softmax` (which torch lacks) and `grouped_linear` (whose plain autograd would be slow) are
Functions that save the minimum their gradients need, uncompressed; `recomputed` saves a small
subgraph's inputs only and runs it again in backward.
"""

from tinykg_train.compress.ops.activations import dropout, leaky_relu, relu
from tinykg_train.compress.ops.bi_interaction import bi_interaction, bi_interaction_rows
from tinykg_train.compress.ops.distance import squared_distance, translation_scores
from tinykg_train.compress.ops.edge_softmax import edge_softmax
from tinykg_train.compress.ops.elementwise import mul, score_margin, sum_of_squares
from tinykg_train.compress.ops.embedding import embedding
from tinykg_train.compress.ops.gather import gather
from tinykg_train.compress.ops.grouped_linear import grouped_linear
from tinykg_train.compress.ops.linear import linear
from tinykg_train.compress.ops.message_passing import spmm
from tinykg_train.compress.ops.normalize import l2_normalize, offer_normalized
from tinykg_train.compress.ops.output_saving import softmax, tanh
from tinykg_train.compress.ops.propagated_bi_interaction import propagated_bi_interaction
from tinykg_train.compress.ops.recompute import recomputed

__all__ = [
    "bi_interaction",
    "bi_interaction_rows",
    "dropout",
    "edge_softmax",
    "embedding",
    "gather",
    "grouped_linear",
    "l2_normalize",
    "leaky_relu",
    "linear",
    "mul",
    "offer_normalized",
    "propagated_bi_interaction",
    "recomputed",
    "relu",
    "score_margin",
    "softmax",
    "spmm",
    "squared_distance",
    "sum_of_squares",
    "tanh",
    "translation_scores",
]
