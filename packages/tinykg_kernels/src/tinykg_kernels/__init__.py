"""tinykg_kernels: quantize saved activations to 1/2/4/8-bit packed codes and back.

Standalone: depends on torch only (Triton optional, used for CUDA tensors).
"""

__version__ = "0.1.0"
