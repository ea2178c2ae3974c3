"""tinykg_train.compress: exact forward, compressed saved activations, dequantized backward.

- `CompressionConfig`: bits (1/2/4/8, or 32 = off), grouping, scheme, projection, minimum size.
- `ops`: autograd ops for what KGNNs save (linear, spmm, edge_softmax, mul, l2_normalize, embedding,
  relu, leaky_relu, dropout); `modules`: thin nn.Module wrappers.
- `compress_saved_tensors(config)`: compress whatever else autograd saves (saved-tensor hooks);
  `uncompressed()` keeps what a block saves as it is (a loss's softplus input, whose gradient is
  nonlinear in it); `through_ops_only(model)` the same scope without the hooks, for a model whose
  every save goes through `ops` (`Recommender.saves_through_ops`).
- `ActivationMeter(model)`: bytes held for backward in one forward pass, in total and per module.

How it fits together:

- Each op computes its forward with the plain torch op (bit-identical output) and keeps for backward
  only what its gradients need, compressed by `codec.compress` (the `tinykg_kernels` quantizer,
  stochastic rounding: unbiased): per-row groups for 2-D activations (several whole rows per group
  when rows are narrow, so a group's 16-bit scale and zero point stay <= 1/4 of its codes), blocks
  of 256 for 1-D ones; ReLU/LeakyReLU/dropout keep 1-bit masks; indices are kept in the narrowest
  integer dtype. Gradients that are linear in the saved tensor (linear, spmm, mul) are unbiased;
  edge_softmax and l2_normalize have backwards quadratic in their saved output, biased only by an
  O(rounding variance) term.
- What need not be rounded is not: parameters are kept as they are, rows gathered from a parameter
  as their indices (`gathered.py`), the input of an L2 normalization as its stored output times
  the exact norms; KGAT's `bi_interaction` stores only its ego vectors and recomputes the rest.
- `stack.py` holds one per-thread stack of saved-tensor layers behind one pair of autograd hooks:
  the innermost `compress_saved_tensors` encodes, every `ActivationMeter` observes the stored form,
  whatever the nesting. Parameters and buffers are never compressed or counted. While a block is
  active, a tensor version is compressed (or narrowed) once however many ops save it.
- `bits=32` turns everything off: the ops are then the plain torch ops (`spmm` and `edge_softmax`
  stay Functions that save the minimum, uncompressed), the hooks store tensors as they are.
"""

from tinykg_train.compress import ops
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.meter import ActivationMeter
from tinykg_train.compress.saved_tensors import (
    compress_saved_tensors,
    through_ops_only,
    uncompressed,
)

__all__ = [
    "ActivationMeter",
    "CompressionConfig",
    "compress_saved_tensors",
    "ops",
    "through_ops_only",
    "uncompressed",
]
