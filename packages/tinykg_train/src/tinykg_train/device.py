"""Pick the torch device of a run from `--device auto|cpu|cuda`."""

from __future__ import annotations

import torch

from tinykg_train.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """`auto` = the first CUDA GPU when torch sees one, else the CPU; `cuda` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                "'device' is cuda but torch sees no CUDA GPU; use --device cpu or --device auto"
            )
        return torch.device("cuda")
    if name == "cpu":
        return torch.device("cpu")
    raise ConfigError(f"'device' must be one of auto, cpu, cuda (got {name!r})")


def describe_device(device: torch.device) -> str:
    """A human label for logs and tags, e.g. "cpu" or "cuda (NVIDIA H100 80GB HBM3)"."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type
