"""Test-wide setup. Kept free of kg_data/tinykg_train imports at module level so the kernel tests also
run in a venv that holds only tinykg_kernels (tests/tinykg_kernels/test_standalone_install.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Triton's interpreter must be chosen before the first `import triton` (ARCHITECTURE.md, "Testing
# habits"). Without a GPU the Triton kernels can only run interpreted; with one they run for real.
if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("TINYKG_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `cuda`-marked tests on machines without a GPU, with the reason shown."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` (or $TINYKG_SHARED_DATA); tests that need it skip cleanly when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA}")
    return SHARED_DATA
