"""benchmarks/profile_step.py: both widths' step times per phase, their profiler tables in --out, bad
input one line and exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.profile_step import main


def test_each_width_and_phase_is_timed_and_profiled(tiny_dataset_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "tables.txt"
    argv = ["--dataset", str(tiny_dataset_dir), "--model", "kgat", "--bits", "4", "--steps", "2",
            "--rows", "5", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    for bits in (32, 4):
        assert f"kgat bits {bits}: epoch-start hook" in printed
        for phase in ("cf", "kg"):
            assert f"kgat bits {bits}: {phase} step" in printed
            assert f"### kgat bits {bits}, {phase} phase, 3 steps, by self_cpu_time_total" in out.read_text()
    assert "aten::" in out.read_text()
    assert "cProfile" not in out.read_text()


def test_python_profile_adds_the_host_functions_by_own_and_cumulative_time(
    tiny_dataset_dir: Path, tmp_path: Path
):
    out = tmp_path / "tables.txt"
    argv = ["--dataset", str(tiny_dataset_dir), "--model", "lightgcn", "--bits", "2", "--steps",
            "2", "--rows", "8", "--out", str(out), "--python-profile"]  # fmt: skip
    assert main(argv) == 0
    text = out.read_text()
    for bits in (32, 2):
        for key in ("tottime", "cumtime"):
            assert f"### lightgcn bits {bits}, cf phase, 2 steps, cProfile by {key}\n   ncalls" in text
    # the compressed width's step runs the codec: its Python frames are in the INT2 tables only
    int2 = text.split("### lightgcn bits 2,", 1)[1]
    assert "compress" in int2 and "run_backward" in int2


@pytest.mark.parametrize("model_sizes", [False, True])
def test_model_sizes_give_the_model_s_own_defaults(tiny_dataset_dir: Path, tmp_path, model_sizes):
    """`--model-sizes`: KGCN as `pipelines.train --model kgcn` trains it (1 hop, 32 wide), not
    `TrainConfig`'s generic 3 layers, 64 wide."""
    from benchmarks.bench_memory import open_step_session
    from tinykg_train.model_defaults import model_defaults

    session = open_step_session(
        tiny_dataset_dir, "kgcn", 2, torch.device("cpu"), tmp_path, model_sizes
    )
    config, own = session.config, model_defaults("kgcn")
    expected = (own["n_layers"], own["embed_dim"]) if model_sizes else (3, 64)
    assert (config.n_layers, config.embed_dim) == expected
    assert own["n_layers"] != 3 and own["embed_dim"] != 64  # the two differ: the test can fail


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "0"], "--steps, --rows and --threads need to be at least 1"),
        (["--dataset", "no-such-dataset"], "dataset 'no-such-dataset'"),
    ]
    + ([] if torch.cuda.is_available() else [(["--device", "cuda"], "needs a CUDA GPU")]),
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
