"""Fixtures shared by the tinykg_train tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def mlflow_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real MLflow sqlite store's tracking URI, one per test module (creating one takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
