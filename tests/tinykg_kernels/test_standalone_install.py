"""`pip install packages/tinykg_kernels[triton]` works alone: a fresh venv with only torch (+ triton)
installs it, round-trips a tensor, and passes the kernel test suite without the sibling packages."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

ROUND_TRIP = """
import importlib.util, sys, torch
from tinykg_kernels import quantize, dequantize
for sibling in ("kg_data", "tinykg_train", "polars", "mlflow"):
    assert importlib.util.find_spec(sibling) is None, f"{sibling} leaked into the standalone venv"
x = torch.randn(33, 70)
q = quantize(x, bits=8, stochastic=False)
err = (dequantize(q) - x).abs().max().item()
span = (x.max(-1).values - x.min(-1).values).max().item()
assert err <= span / 255, (err, span)
assert x.nbytes / q.nbytes > 3.5, q.nbytes
from tinykg_kernels import native
assert all(s.is_file() for s in (*native.SOURCES, *native.HEADERS)), "native/ sources not installed"
print("round-trip ok", err)
"""


def _pip(python: Path, *args: str) -> None:
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *args], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def standalone_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("kernels-venv")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # torch pinned to the local CPU wheel (a bare torch would pull a multi-GB CUDA build)
    _pip(
        python,
        "torch==2.13.0",
        f"{ROOT / 'packages' / 'tinykg_kernels'}[triton]",
        "pytest",
        "pytest-timeout",
    )
    return python


def test_installs_alone_and_round_trips(standalone_python: Path):
    result = subprocess.run(
        [str(standalone_python), "-c", ROUND_TRIP], capture_output=True, text=True, cwd="/"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "round-trip ok" in result.stdout


def test_kernel_suite_passes_in_standalone_venv(standalone_python: Path):
    tests = sorted(
        p.name for p in Path(__file__).parent.glob("test_*.py") if p.name != Path(__file__).name
    )
    assert tests, "no kernel tests found next to this file"
    result = subprocess.run(
        [str(standalone_python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
