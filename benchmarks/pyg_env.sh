#!/usr/bin/env bash
# Build the separate environment that bench_sampling uses to time PyG's NeighborLoader.
#
# PyG's neighbor sampler needs pyg-lib (not on PyPI) or torch-sparse, which PyPI only ships as a
# source distribution. This script makes benchmarks/.venv-pyg (gitignored) with the project's
# packages plus torch-scatter and torch-sparse compiled against the same torch 2.13.0 CPU build.
# Compiling takes 15-30 minutes on 2 cores (13 min measured for both); run it in the background and keep the log:
#
#   bash benchmarks/pyg_env.sh > /tmp/pyg_env.log 2>&1 &
#
# Then: benchmarks/.venv-pyg/bin/python -m benchmarks.bench_sampling
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${PYG_VENV:-$repo_root/benchmarks/.venv-pyg}"
python="${PYTHON:-python3.11}"
jobs="${MAX_JOBS:-$(nproc)}"

echo "[pyg_env] creating $venv with $($python --version)"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip)
"${pip[@]}" install --upgrade pip setuptools wheel
# torch first: the extensions are built against the installed torch, without build isolation.
"${pip[@]}" install "torch==2.13.0" "numpy==2.4.6"
"${pip[@]}" install -e "$repo_root/packages/kg_data" "polars==2.1.0" "pyarrow==25.0.1" \
    "torch-geometric==2.8.1" "tqdm==4.70.1" "psutil==7.2.2" "matplotlib==3.11.2"

export MAX_JOBS="$jobs"
echo "[pyg_env] building torch-scatter and torch-sparse from source (MAX_JOBS=$MAX_JOBS)"
start=$(date +%s)
"${pip[@]}" install --no-build-isolation --no-binary torch-scatter,torch-sparse \
    torch-scatter torch-sparse
echo "[pyg_env] built in $(( $(date +%s) - start )) s"

"$venv/bin/python" - <<'EOF'
import torch
import torch_sparse  # noqa: F401
from torch_geometric.loader import NeighborLoader  # noqa: F401
from torch_geometric.typing import WITH_TORCH_SPARSE

print(f"[pyg_env] ok: torch {torch.__version__}, torch_sparse {torch_sparse.__version__}, "
      f"WITH_TORCH_SPARSE={WITH_TORCH_SPARSE}")
EOF
