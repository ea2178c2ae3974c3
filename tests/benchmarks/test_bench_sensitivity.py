"""benchmarks/bench_sensitivity.py: per model and phase, every site's error per width, falling as
the width grows, with the dataset's shape and whether the model was trained."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.bench_sensitivity import main


def test_sites_are_measured_per_width_for_each_model_and_phase(
    tiny_dataset_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    plan = tmp_path / "plan.yaml"
    plan.write_text(json.dumps({
        "datasets": {"tiny": {"path": str(tiny_dataset_dir)}}, "models": ["kgat"],
        "widths": [32], "seeds": [0], "modes": {"whole": {}},
        "train": {"embed_dim": 8, "n_layers": 2, "device": "cpu", "batch_size": 64, "kg_batch_size": 64},
    }))  # fmt: skip
    argv = ["--plan", str(plan), "--models", "kgat,kgin", "--bits", "1,2,8", "--draws", "2",
            "--matrix", str(tmp_path / "none")]  # fmt: skip
    assert main(argv) == 0
    text = md.read_text()
    assert "<!-- begin:sensitivity-tiny-cpu -->" in text  # one dataset: its own section
    assert "tiny/kgat: untrained" in text and "| tiny | 200 | 300 |" in text
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| tiny | k")]
    phases = {(row[1], row[2]) for row in rows}
    assert phases == {("kgat", "cf"), ("kgat", "kg"), ("kgin", "cf")}
    for row in rows:
        one, two, eight = (float(v) for v in row[7:10])
        assert one >= two >= eight >= 0
        assert re.fullmatch(r"\d\.\d\d", row[10])  # bias over error at 2 bits
        name, error = row[12].removesuffix(" |").split(" ")  # the hardest-hit parameter
        assert re.fullmatch(r"[a-z_]+(\.\w+)*", name) and float(error) >= float(two)
