"""--device auto|cpu|cuda."""

from __future__ import annotations

import pytest
import torch

from tinykg_train.device import describe_device, resolve_device
from tinykg_train.errors import ConfigError


def test_auto_takes_the_gpu_only_when_torch_sees_one():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device("cpu") == torch.device("cpu")
    assert describe_device(torch.device("cpu")) == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_cuda_without_a_gpu_is_one_clear_line():
    with pytest.raises(
        ConfigError, match="torch sees no CUDA GPU; use --device cpu or --device auto"
    ):
        resolve_device("cuda")


@pytest.mark.cuda
def test_cuda_is_described_with_the_gpu_name():
    assert describe_device(resolve_device("cuda")).startswith("cuda (")
