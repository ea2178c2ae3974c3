"""Modules whose ops save compressed activations: `CompressedModule`, `set_compression`, and thin
`nn.Module` wrappers of `ops` for models that prefer modules (the config is a constructor arg).

Every module that holds a `CompressionConfig` holds it as `self.compression` and is a
`CompressedModule`: the wrappers here, the models' layers and the models themselves. So
`set_compression(root, config)` reaches all of them, and a layer may keep its own config (per-layer
widths) by being set alone.
"""

from __future__ import annotations

import torch
from torch import nn

from tinykg_train.compress import ops
from tinykg_train.compress.config import CompressionConfig


class CompressedModule(nn.Module):
    """A module whose ops save activations per `self.compression` (a `CompressionConfig`).

    A marker base with no `__init__` of its own, so it mixes with any `nn.Module` subclass:
    subclasses set `self.compression` in their constructor.
    """

    compression: CompressionConfig


def set_compression(root: nn.Module, compression: CompressionConfig) -> None:
    """Use `compression` from now on in `root` and every `CompressedModule` inside it."""
    if not isinstance(compression, CompressionConfig):
        raise TypeError(f"set_compression needs a CompressionConfig (got {type(compression).__name__})")
    for module in root.modules():
        if isinstance(module, CompressedModule):
            module.compression = compression


class Linear(CompressedModule, nn.Linear):
    """`nn.Linear` whose saved input is compressed per `config` (same parameters and init)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        config: CompressionConfig,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.compression = config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.linear(x, self.weight, self.bias, config=self.compression)


class ReLU(CompressedModule):
    def __init__(self, *, config: CompressionConfig) -> None:
        super().__init__()
        self.compression = config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.relu(x, config=self.compression)


class LeakyReLU(CompressedModule):
    def __init__(self, negative_slope: float = 0.01, *, config: CompressionConfig) -> None:
        super().__init__()
        self.negative_slope, self.compression = negative_slope, config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.leaky_relu(x, self.negative_slope, config=self.compression)


class Dropout(CompressedModule):
    """Dropout that follows `self.training` like `nn.Dropout`."""

    def __init__(self, p: float = 0.5, *, config: CompressionConfig) -> None:
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability 'p' needs to be in [0, 1] (got {p})")
        self.p, self.compression = p, config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.dropout(x, self.p, self.training, config=self.compression)


class L2Normalize(CompressedModule):
    def __init__(self, dim: int = -1, eps: float = 1e-12, *, config: CompressionConfig) -> None:
        super().__init__()
        self.dim, self.eps, self.compression = dim, eps, config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.l2_normalize(x, self.dim, self.eps, config=self.compression)
