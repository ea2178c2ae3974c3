"""Test-wide setup. Kept free of kg_data/tinykg_train imports at module level so the kernel tests also
run in a venv that holds only tinykg_kernels (tests/tinykg_kernels/test_standalone_install.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Triton's interpreter must be chosen before the first `import triton` (docs/ARCHITECTURE.md,
# "Testing habits"). Without a GPU the Triton kernels can only run interpreted; with one they run for real.
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


@pytest.fixture(scope="session")
def tiny_raw_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic raw KGAT dir (200 users, 300 items, 600 extra entities, 6 relations, seed 0).

    Shared by the whole session: treat it as read-only.
    """
    from kg_data.synthetic import write_synthetic_kgat

    return write_synthetic_kgat(
        tmp_path_factory.mktemp("tiny_raw"),
        n_users=200,
        n_items=300,
        n_extra_entities=600,
        n_relations=6,
        mean_user_degree=15,
        seed=0,
    )


@pytest.fixture(scope="session")
def tiny_dataset_dir(tiny_raw_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tiny_raw_dir` ingested into a dataset dir (open it with `kg_data.KGDataset.open`). Read-only."""
    from kg_data import ingest

    return ingest(tiny_raw_dir, tmp_path_factory.mktemp("tiny_dataset") / "tiny", progress=False).path


@pytest.fixture(scope="module")
def ray_cluster():
    """A private Ray head on 127.0.0.1 (tests/ray_cluster.py: own token, free ports), stopped after
    the module's tests however they end. Yields a `LocalRayCluster` (`.submit(...)`, `.env()`)."""
    from tests.ray_cluster import LocalRayCluster

    with LocalRayCluster(num_cpus=2) as cluster:
        yield cluster
