"""tinykg_kernels: quantize saved activations to 1/2/4/8-bit packed codes and back.

Standalone: depends on torch only. Backends, named after what runs (`dispatch`): Triton kernels on
CUDA (optional extra), native C++ loops built on first use (`cpu-native`) or inductor's loops
(`cpu-inductor`) for large CPU tensors, plain torch for the rest (`torch`, also the reference).

    from tinykg_kernels import quantize, dequantize
    q = quantize(x, bits=2)          # unbiased stochastic rounding, one group per row
    x_hat = dequantize(q)            # same shape and dtype; q.nbytes is what it costs to keep
    packed = pack_bits(x > 0)        # a bool mask at one bit per element; unpack_bits(packed, shape)
    out, mask_a, mask_b = leaky_relu_pair(a, b, 0.2)   # fused LeakyReLU sum with 1-bit sign masks
    backend_usage()                  # {"quantize": {"cpu-native": 3}, ...}: what ran, per op
"""

from tinykg_kernels import dispatch
from tinykg_kernels.api import QuantizedMeta, QuantizedTensor, dequantize, quantize
from tinykg_kernels.bitmask import pack_bits, unpack_bits
from tinykg_kernels.dispatch import BACKEND_ENV, BACKENDS
from tinykg_kernels.dropout import apply_dropout_noise, dropout_noise_backward
from tinykg_kernels.leaky_pair import leaky_relu_pair, leaky_relu_pair_backward
from tinykg_kernels.planes import pack_planes, unpack_planes
from tinykg_kernels.projection import project, unproject
from tinykg_kernels.rows import live_rows
from tinykg_kernels.sparse import csr_matmul, csr_transposed_add_
from tinykg_kernels.usage import backend_usage, backends_used, runtime_report

__version__ = "0.1.0"


def __getattr__(name: str):
    """`tinykg_kernels.WITH_TRITON`: whether Triton imports here, probed on first read (`dispatch`)."""
    if name == "WITH_TRITON":
        return dispatch.with_triton()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BACKENDS",
    "BACKEND_ENV",
    "WITH_TRITON",
    "QuantizedMeta",
    "QuantizedTensor",
    "__version__",
    "apply_dropout_noise",
    "backend_usage",
    "backends_used",
    "csr_matmul",
    "csr_transposed_add_",
    "dequantize",
    "dropout_noise_backward",
    "leaky_relu_pair",
    "leaky_relu_pair_backward",
    "live_rows",
    "pack_bits",
    "pack_planes",
    "project",
    "quantize",
    "runtime_report",
    "unpack_bits",
    "unpack_planes",
    "unproject",
]
