"""benchmarks/rss_by_phase.py: a training run's peak RSS per part of the run, highest first; the
trainer's functions are restored afterwards; bad training flags are one line and exit status 2."""

from __future__ import annotations

from pathlib import Path

import torch

from benchmarks import rss_by_phase
from pipelines._cli import run_cli
from tinykg_train import epoch, evaluate, trainer


def test_a_kgat_run_lists_every_part_highest_first_and_leaves_the_trainer_as_it_was(
    tiny_dataset_dir: Path, tmp_path: Path, capsys
):
    before = (trainer.open_session, epoch.run_phase, epoch.epoch_start_measured,
              torch.autograd.backward, evaluate.RankingEvaluator.evaluate)  # fmt: skip
    argv = ["--data", str(tiny_dataset_dir), "--out", str(tmp_path / "run"), "--model", "kgat",
            "--bits", "2", "--epochs", "1", "--max-batches-per-epoch", "2"]  # fmt: skip
    assert rss_by_phase.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[lines.index(next(line for line in lines if line.startswith("part "))) + 1 :]
    parts = {line[:24].strip(): float(line[24:].split()[0].replace(",", "")) for line in table}
    expected = {"open session", "epoch start", "cf forward", "cf backward", "kg forward",
                "kg backward", "ranking valid", "ranking valid scoring", "ranking test"}  # fmt: skip
    assert expected <= set(parts), parts
    assert list(parts.values()) == sorted(parts.values(), reverse=True)
    assert min(parts.values()) > 50  # MiB: an interpreter with torch at least
    after = (trainer.open_session, epoch.run_phase, epoch.epoch_start_measured,
             torch.autograd.backward, evaluate.RankingEvaluator.evaluate)  # fmt: skip
    assert after == before


def test_help_and_a_bad_flag(capsys):
    assert rss_by_phase.main(["--help"]) == 0
    assert "python -m benchmarks.rss_by_phase" in capsys.readouterr().out
    assert run_cli(rss_by_phase.main, ["--model", "no-such-model", "--no-mlflow"]) == 2
