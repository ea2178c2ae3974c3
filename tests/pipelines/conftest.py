"""Fixtures shared by the pipelines CLI tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pipeline_help(repo_root: Path) -> Callable[[str], subprocess.CompletedProcess]:
    """Runs `python -m pipelines.<name> --help` from the repo root, as a user would; returns the
    finished process (text stdout/stderr)."""

    def run(name: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", f"pipelines.{name}", "--help"],
            cwd=repo_root,
            capture_output=True,
            text=True,
            timeout=60,
        )

    return run
