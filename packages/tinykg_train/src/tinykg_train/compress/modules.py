"""Thin `nn.Module` wrappers of `ops` for models that prefer modules (the config is a constructor arg)."""

from __future__ import annotations

import torch
from torch import nn

from tinykg_train.compress import ops
from tinykg_train.compress.config import CompressionConfig


class Linear(nn.Linear):
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
        self.config = config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.linear(x, self.weight, self.bias, config=self.config)


class ReLU(nn.Module):
    def __init__(self, *, config: CompressionConfig) -> None:
        super().__init__()
        self.config = config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.relu(x, config=self.config)


class LeakyReLU(nn.Module):
    def __init__(self, negative_slope: float = 0.01, *, config: CompressionConfig) -> None:
        super().__init__()
        self.negative_slope, self.config = negative_slope, config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.leaky_relu(x, self.negative_slope, config=self.config)


class Dropout(nn.Module):
    """Dropout that follows `self.training` like `nn.Dropout`."""

    def __init__(self, p: float = 0.5, *, config: CompressionConfig) -> None:
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability 'p' needs to be in [0, 1] (got {p})")
        self.p, self.config = p, config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.dropout(x, self.p, self.training, config=self.config)


class L2Normalize(nn.Module):
    def __init__(self, dim: int = -1, eps: float = 1e-12, *, config: CompressionConfig) -> None:
        super().__init__()
        self.dim, self.eps, self.config = dim, eps, config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.l2_normalize(x, self.dim, self.eps, config=self.config)
