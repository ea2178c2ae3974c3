"""python -m pipelines.sweep: help, and every bad input is one line with exit status 2 before any
Ray or MLflow work starts (whole sweeps run in tests/tinykg_train/test_sweep_driver.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines._cli import run_cli
from pipelines.sweep import build_parser, main, spec_from_args
from tinykg_train.sweep.space import Axis
from tinykg_train.sweep.spec import SweepSpec


def run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = run_cli(main, argv)
    except SystemExit as exit_:  # argparse: --help, or a flag it cannot parse
        code = exit_.code
    return code, capsys.readouterr().err


def test_help_lists_the_overrides(pipeline_help):
    done = pipeline_help("sweep")
    assert done.returncode == 0
    for flag in (
        "--bits",
        "--lr",
        "--seed",
        "--epochs",
        "--max-concurrent",
        "--experiment",
        "--resume",
        "--asha",
    ):
        assert flag in done.stdout


def test_flags_and_config_make_one_spec(tmp_path):
    config = tmp_path / "s.yaml"
    config.write_text(
        "name: mine\ntrain: {epochs: 9}\nspace: {model: [kgat, kgcn]}\nasha: {grace_period: 3}\n"
    )
    args = build_parser().parse_args(
        [
            "--config",
            str(config),
            "--bits",
            "2,32",
            "--lr",
            "0.01",
            "--epochs",
            "6",
            "--set",
            "batch_size=512",
            "--no-asha",
        ]
    )
    spec = spec_from_args(args)
    assert spec.axes == (Axis("model", "grid", ("kgat", "kgcn")), Axis("bits", "grid", (2, 32)))
    assert spec.train == {"epochs": 6, "lr": 0.01, "batch_size": 512}
    assert spec.name == "mine" and spec.asha is None and spec.n_trials == 4


def test_every_sweep_flag_reaches_its_spec_setting():
    argv = [
        "--epochs", "4", "--name", "n", "--experiment", "e", "--num-samples", "2",
        "--max-concurrent", "3", "--cpus-per-trial", "2", "--gpus-per-trial", "0.5",
        "--model-builder", "tinykg_train.models:build_model",
    ]  # fmt: skip
    args = build_parser().parse_args(argv)
    spec = spec_from_args(args)
    assert spec.train == {"epochs": 4}
    assert (spec.name, spec.experiment, spec.num_samples, spec.max_concurrent) == ("n", "e", 2, 3)
    assert (spec.cpus_per_trial, spec.gpus_per_trial) == (2.0, 0.5)
    assert spec.model_builder == "tinykg_train.models:build_model"


@pytest.fixture
def sweep_dir(tmp_path, tiny_dataset_dir):
    """A finished-looking sweep dir (its sweep.json), for the resume checks."""
    spec = SweepSpec(name="s", train={"epochs": 2}, axes=(Axis("bits", "grid", (2, 32)),))
    folder = tmp_path / "sweeps" / "s"
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(
        json.dumps(
            {
                "spec": spec.to_dict(),
                "data": str(Path(tiny_dataset_dir).resolve()),
                "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                "experiment_id": "1",
                "parent_run_id": "abc",
            }
        )
    )
    return tmp_path / "sweeps"


def error_cases(tmp_path: Path, data: Path, sweeps: Path):
    """(argv, what the one error line says)."""
    base = ["--data", str(data), "--out", str(tmp_path / "out")]
    return [
        (["--colour", "red"], "unrecognized arguments: --colour red"),
        (["--num-samples", "many"], "argument --num-samples: invalid int value"),
        (["--out", str(tmp_path / "o")], "--data is required"),
        ([*base, "--bits", "2,3"], "'bits' must be one of 1, 2, 4, 8, 32 or auto (got 3)"),
        ([*base, "--lr", "fast"], "'lr' needs a number (got 'fast')"),
        ([*base, "--seed", "0,,1"], "--seed: expected a value or a comma list"),
        ([*base, "--set", "colour=red"], "unknown setting(s) colour"),
        ([*base, "--max-concurrent", "0"], "'max_concurrent' needs to be a positive integer"),
        ([*base, "--config", str(tmp_path / "none.yaml")], "none.yaml: config file not found"),
        ([*base, "--model-builder", "nowhere:build"], "cannot import nowhere"),
        (
            [*base, "--epochs", "2", "--asha", "--set", "eval_every=2"],
            "'asha.grace_period' (1) needs to be a multiple of eval_every (2)",
        ),
        (
            [*base, "--address", "auto", "--num-cpus", "2"],
            "--num-cpus/--num-gpus size a private local Ray",
        ),
        (["--data", str(tmp_path), "--out", str(tmp_path / "o")], "metadata.json"),
        (["--out", str(tmp_path / "nothing"), "--resume"], "no sweep to resume there"),
        (
            ["--data", str(data), "--out", str(sweeps), "--name", "s"],
            "already holds a sweep: pass --resume",
        ),
        (
            ["--out", str(sweeps), "--name", "s", "--resume", "--bits", "2,4", "--epochs", "2"],
            "cannot resume with other trial settings (axes:",
        ),
        (
            [
                "--out",
                str(sweeps),
                "--name",
                "s",
                "--resume",
                "--bits",
                "2,32",
                "--epochs",
                "2",
                "--tracking-uri",
                "sqlite:////elsewhere.db",
            ],
            "the sweep used tracking_uri",
        ),
        (
            [*base, "--tracking-uri", f"sqlite:///{tmp_path}/a-file/mlflow.db"],
            "MLflow store sqlite:///",
        ),
    ]


def test_every_bad_input_is_one_line_and_exit_2(tmp_path, tiny_dataset_dir, sweep_dir, capsys):
    (tmp_path / "a-file").write_text("a file where the store's folder should be")
    for argv, message in error_cases(tmp_path, Path(tiny_dataset_dir), sweep_dir):
        code, err = run(argv, capsys)
        assert code == 2, (argv, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (
            argv,
            err,
        )
    assert not (tmp_path / "out").exists()  # nothing written for a refused sweep


def test_partitions_is_a_sweep_axis():
    spec = spec_from_args(build_parser().parse_args(["--partitions", "1,4", "--model", "lightgcn"]))
    assert Axis("partitions", "grid", (1, 4)) in spec.axes and spec.n_trials == 2
