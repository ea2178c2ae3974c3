"""tinykg_train.compress: exact forward, compressed saved activations, dequantized backward.

- `CompressionConfig`: bits (1/2/4/8, or 32 = off), grouping, scheme, projection, min size.
- `ops`: autograd ops for what KGNNs save (linear, spmm, edge_softmax, mul, l2_normalize,
  embedding, relu, leaky_relu, dropout); `modules`: thin nn.Module wrappers.
- `compress_saved_tensors(config)`: compress whatever else autograd saves (saved-tensor hooks).
- `ActivationMeter(model)`: bytes held for backward in one forward pass, per module.
"""

from tinykg_train.compress import ops
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.compress.meter import ActivationMeter
from tinykg_train.compress.saved_tensors import compress_saved_tensors

__all__ = ["ActivationMeter", "CompressionConfig", "compress_saved_tensors", "ops"]
