"""benchmarks/lockstep_divergence.py: FP32, the A/A control and a width stepped in lockstep; the
control stays within float rounding of FP32 at first, the width does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.lockstep_divergence import main


def test_the_control_starts_at_rounding_distance_and_the_width_does_not(
    tiny_dataset_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        json.dumps(
            {
                "datasets": {"tiny": {"path": str(tiny_dataset_dir)}},
                "models": ["kgat"],
                "widths": [32, 2],
                "seeds": [0],
                "modes": {"whole": {}},
                "train": {"embed_dim": 16, "n_layers": 2, "batch_size": 64, "dropout": 0.2},
            }
        )
    )
    argv = ["--plan", str(plan), "--dataset", "tiny", "--steps", "3", "--every", "1"]
    assert main(argv) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [int(row[0]) for row in rows] == [1, 2, 3]
    control, width = (float(v) for v in rows[0][1:])
    assert control < 1e-3 < width  # one step: float rounding against the width's own noise
    with pytest.raises(SystemExit, match="'nope' is not a dataset of"):
        main(["--plan", str(plan), "--dataset", "nope"])
