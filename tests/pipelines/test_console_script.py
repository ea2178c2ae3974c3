"""`tinykg COMMAND` (the root project's console script) and `python -m pipelines.COMMAND` work from a
directory outside the repository, with each command's --help and exit codes (2 for bad input).

The subprocess tests need the root project installed (`python -m pip install -r requirements.txt`
installs it with `-e .`); they run without the repository on PYTHONPATH, so `pipelines` must come
from the installation. `pipelines.cli.main` itself is tested in-process everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from pipelines import cli
from pipelines._cli import prog_name

ROOT = Path(__file__).resolve().parents[2]
TINYKG = Path(sys.executable).parent / "tinykg"  # where pip put the console script


def _installed() -> bool:
    try:
        metadata.distribution("tinykg")
    except metadata.PackageNotFoundError:
        return False
    return TINYKG.is_file()


needs_install = pytest.mark.skipif(
    not _installed(),
    reason="the root project is not installed in this environment: run "
    "`python -m pip install -r requirements.txt` (or `pip install --no-deps -e .`)",
)


def outside(tmp_path: Path, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`command` run in `tmp_path` with the repository root off PYTHONPATH."""
    env = dict(os.environ)
    kept = [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT
    ]
    env["PYTHONPATH"] = os.pathsep.join(kept)
    assert not tmp_path.resolve().is_relative_to(ROOT)
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


@needs_install
def test_tinykg_help_lists_every_command_from_outside_the_repository(tmp_path: Path):
    result = outside(tmp_path, str(TINYKG), "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage: tinykg [-h] [--version] COMMAND [ARGS ...]")
    for command in cli.COMMANDS:
        assert f"\n  {command}" in result.stdout


@needs_install
@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_command_has_help_under_its_own_name(command: str, tmp_path: Path):
    result = outside(tmp_path, str(TINYKG), command, "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"usage: tinykg {command} [-h]")


@needs_install
def test_bad_input_exits_2_with_one_line_as_the_modules_do(tmp_path: Path):
    by_script = outside(tmp_path, str(TINYKG), "ingest", "no-such-dir", "--out", "ds")
    by_module = outside(
        tmp_path, sys.executable, "-m", "pipelines.ingest", "no-such-dir", "--out", "ds"
    )
    for result in (by_script, by_module):
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [
            "error: no-such-dir: no such directory; give the folder that holds the raw files"
        ]
    assert outside(tmp_path, str(TINYKG), "nope").returncode == 2
    assert not (tmp_path / "ds").exists()


@needs_install
def test_a_tiny_ingest_and_training_run_from_outside_the_repository(
    tiny_raw_dir: Path, tmp_path: Path
):
    ingest = outside(tmp_path, str(TINYKG), "ingest", str(tiny_raw_dir), "--out", "ds")
    assert ingest.returncode == 0, ingest.stderr[-2000:]
    assert (tmp_path / "ds" / "metadata.json").is_file()
    train = outside(
        tmp_path, sys.executable, "-m", "pipelines.train", "--data", "ds", "--out", "run",
        "--model", "bprmf", "--epochs", "1", "--embed-dim", "8", "--batch-size", "256",
        "--max-batches-per-epoch", "2", "--device", "cpu", "--no-mlflow",
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-2000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["model"] == "bprmf" and 0 <= metrics["recall@20"] <= 1


def test_main_hands_the_rest_to_the_command_and_keeps_its_exit_status(tmp_path: Path, capsys):
    assert cli.main(["ingest", str(tmp_path / "missing"), "--out", str(tmp_path / "ds")]) == 2
    assert "no such directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as shown:
        cli.main(["train", "--help"])
    assert shown.value.code == 0 and "--bits B" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [[], ["nope"], ["--verbose", "train"]])
def test_no_command_first_is_a_usage_error(argv: list[str], capsys):
    with pytest.raises(SystemExit) as refused:
        cli.main(argv)
    assert refused.value.code == 2 and "usage: tinykg" in capsys.readouterr().err


def test_usage_lines_name_the_command_as_it_was_run(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/tinykg", "train"])
    assert prog_name("train") == "tinykg train"
    monkeypatch.setattr(sys, "argv", [str(ROOT / "pipelines" / "train.py")])
    assert prog_name("train") == "python -m pipelines.train"
