"""bench_scale: the size presets make graphs of the size they are named by, the report's table and
"largest that fits" follow the per-mode results, a child that runs out of memory is told apart from
one that fails otherwise, and a tiny run of two modes reports both without touching BENCHMARKS.md."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import pytest
import yaml

from benchmarks import bench_scale
from benchmarks._scale_report import (
    DEFAULT_MODES,
    MODES,
    eval_users_text,
    largest_fitting,
    parse_size_preset,
    report,
    results_table,
    same_state_ratios,
    training_text,
)


@pytest.mark.parametrize(
    ("name", "total", "entities"),
    [("100k", 10**5, 10**4), ("1m", 10**6, 10**5), ("10m", 10**7, 10**6), ("100m", 10**8, 10**7)],
)
def test_size_presets_name_their_triples_plus_interactions_and_a_tenth_as_many_entities(
    name, total, entities
):
    preset = parse_size_preset(name)
    kwargs = preset.generator_kwargs()
    assert preset.total == total
    assert kwargs["n_items"] + kwargs["n_extra_entities"] == entities
    # the interactions the generator is asked for: about 60% of the total (triples are the rest)
    assert 0.5 * total < kwargs["n_users"] * kwargs["mean_user_degree"] < 0.7 * total


def test_smallest_preset_generates_a_graph_within_15_percent_of_its_size(tmp_path):
    from kg_data.synthetic import write_synthetic_kgat

    preset = parse_size_preset("100k")
    raw = write_synthetic_kgat(tmp_path / "raw", **preset.generator_kwargs())
    triples = len((raw / "kg_final.txt").read_text().splitlines())
    interactions = sum(
        len(line.split()) - 1
        for split in ("train", "valid", "test")
        for line in (raw / f"{split}.txt").read_text().splitlines()
    )
    assert abs(triples + interactions - preset.total) < 0.15 * preset.total


@pytest.mark.parametrize("text", ["", "abc", "0", "-1m", "10x", "100"])
def test_bad_size_names_are_refused_with_the_form_to_use(text):
    with pytest.raises(ValueError, match="triples \\+ interactions"):
        parse_size_preset(text)


def fake(size: str, mode: str, peak_mib: float | None, seconds: float = 0.5) -> dict:
    if peak_mib is None:
        return {"size": size, "mode": mode, "fits": False, "failure": "allocation failed"}
    return {"size": size, "mode": mode, "fits": True, "peak_rss_bytes": int(peak_mib * 2**20),
            "seconds_per_step": seconds}  # fmt: skip


FAKE = [
    fake("100k", "fp32-whole", 900),
    fake("100k", "int2-sampled", 700),
    fake("1m", "fp32-whole", None),
    fake("1m", "int2-sampled", 1200, 2.25),
    fake("10m", "fp32-whole", None),
    fake("10m", "int2-sampled", None),
]


def test_largest_fitting_size_is_the_last_size_a_mode_trained_within_the_limit():
    sizes, modes = ["100k", "1m", "10m"], ["fp32-whole", "int2-sampled", "int2-offloaded"]
    assert largest_fitting(FAKE, sizes, modes) == {
        "fp32-whole": "100k",
        "int2-sampled": "1m",
        "int2-offloaded": None,
    }


def test_results_table_has_a_row_per_size_and_a_cell_per_mode():
    table = results_table(FAKE, ["100k", "1m", "10m"], ["fp32-whole", "int2-sampled"]).splitlines()
    assert table[0] == "| size | fp32-whole | int2-sampled |"
    assert table[2] == "| 100k | 900 MiB / 0.50 s / fits | 700 MiB / 0.50 s / fits |"
    assert table[3] == "| 1m | does not fit (allocation failed) | 1,200 MiB / 2.25 s / fits |"
    assert len(table) == 5


def test_report_names_the_largest_size_per_mode_and_the_limit():
    ingests = [
        {"size": s, "n_entities": n // 10, "n_triples": n // 3, "n_interactions": n // 2,
         "raw_bytes": n * 10, "ingest_seconds": 1.0, "peak_rss_bytes": 2**28}
        for s, n in (("100k", 10**5), ("1m", 10**6), ("10m", 10**7))
    ]  # fmt: skip
    settings = {"model": "kgat", "steps": 5, "threads": 1, "memory_limit_text": "2GB"}
    body = report(FAKE, ingests, ["fp32-whole", "int2-sampled"], settings, figure=None)
    assert "fp32-whole **100k**, int2-sampled **1m**" in body
    assert "resident set is held to 2GB" in body
    assert "| 1m | 100,000 | 333,333 | 500,000 | 10.0 | 1.00 | 10.0 | 256 |" in body


def test_on_cuda_the_cells_show_the_device_peak_and_the_text_says_so():
    on_gpu = {**fake("1m", "int2-whole", 3000), "cuda_max_memory_allocated": 512 * 2**20}
    assert results_table([on_gpu], ["1m"], ["int2-whole"]).splitlines()[2] == (
        "| 1m | 512 MiB / 0.50 s / fits |"
    )
    ingests = [{"size": "1m", "n_entities": 10**5, "n_triples": 3 * 10**5, "n_interactions": 6 * 10**5,
                "raw_bytes": 10**7, "ingest_seconds": 1.0, "peak_rss_bytes": 2**28}]  # fmt: skip
    settings = {"model": "kgat", "steps": 3, "threads": 1, "memory_limit_text": "80GB",
                "device": "cuda", "budget_s": "300", "stopped_by_budget": True}  # fmt: skip
    body = report([on_gpu], ingests, ["int2-whole", "int2-sampled"], settings, figure=None)
    assert "device memory is held to 80GB" in body and "resident set is held" not in body
    assert "Stopped by `--budget-s 300`: a cell marked `-` did not run." in body
    assert "| 1m | 512 MiB / 0.50 s / fits | - |" in body
    # the budget kept int2-sampled from the size: not "does not fit", and said so
    assert "int2-whole **1m**, int2-sampled **none** (1m not run)." in body


def test_a_time_budget_stops_before_the_next_run_and_reports_what_ran(
    tmp_path, capsys, monkeypatch
):
    ticks = iter(range(1000))  # one second per reading: start 0, first size 1, first run 2, ...
    monkeypatch.setattr(bench_scale, "clock", lambda: next(ticks))
    argv = ["--sizes", "5k,100k", "--modes", "int2-whole,int2-sampled", "--steps", "1",
            "--device", "cpu", "--work-dir", str(tmp_path / "work"), "--no-write",
            "--budget-s", "2.5"]  # fmt: skip
    assert bench_scale.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\| 5k \| [\d,]+ MiB / [\d.]+ s / fits \| - \|$", out, re.MULTILINE)
    assert "| 100k |" not in out  # the next size never started
    assert "Stopped by `--budget-s 2.5`" in out


def test_a_child_that_cannot_allocate_does_not_fit_and_other_failures_raise(tmp_path):
    hog = [sys.executable, "-c", "import time; b = bytearray(2 * 10**9); time.sleep(30)"]
    started = time.perf_counter()
    with pytest.raises(bench_scale.OutOfMemory, match="resident set over the limit"):
        bench_scale.run_child(hog, tmp_path / "hog", limit=500 * 10**6)
    assert time.perf_counter() - started < 20  # the watchdog killed it, not the end of its sleep
    # back under the limit by the next read: its high-water mark says it went over
    blip = [sys.executable, "-c", "import time; b = bytearray(800 * 10**6); del b; time.sleep(0.3)"]
    with pytest.raises(bench_scale.OutOfMemory, match="resident set over the limit"):
        bench_scale.run_child(blip, tmp_path / "blip", limit=500 * 10**6)
    # reserved but never touched address space is not resident: it fits
    reserve = [sys.executable, "-c", "import mmap; m = mmap.mmap(-1, 4 * 10**9); print('ok')"]
    assert (
        bench_scale.run_child(reserve, tmp_path / "reserve", limit=500 * 10**6)["stdout"] == "ok\n"
    )
    killed = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    with pytest.raises(bench_scale.OutOfMemory, match="SIGKILL"):  # as the OOM killer does
        bench_scale.run_child(killed, tmp_path / "killed", limit=None)
    terminated = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
    with pytest.raises(RuntimeError, match="failed"):
        bench_scale.run_child(terminated, tmp_path / "terminated", limit=None)
    with pytest.raises(RuntimeError, match="ValueError"):
        bench_scale.run_child(
            [sys.executable, "-c", "raise ValueError"], tmp_path / "bad", limit=None
        )
    done = bench_scale.run_child([sys.executable, "-c", "print('ok')"], tmp_path / "ok", limit=None)
    assert done["stdout"] == "ok\n" and done["peak_rss_bytes"] > 0
    # the child's own peak, not this (bigger) process's pages it was forked from
    ballast = bytearray(600 * 10**6)  # noqa: F841 (held while the child runs)
    small = [sys.executable, "-c", "import time; time.sleep(0.5)"]
    assert (
        bench_scale.run_child(small, tmp_path / "small", limit=500 * 10**6)["peak_rss_bytes"]
        < 100 * 2**20
    )


def test_tiny_run_of_two_modes_reports_both_a_full_training_and_leaves_benchmarks_md_alone(
    tmp_path, monkeypatch, capsys
):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    argv = ["--sizes", "5k", "--modes", "fp32-whole,int2-sampled", "--steps", "1", "--device", "cpu",
            "--memory-limit", "3GB", "--work-dir", str(tmp_path / "work"), "--no-write",
            "--train-epochs", "1", "--train-modes", "int2-sampled"]  # fmt: skip
    assert bench_scale.main(argv) == 0
    out = capsys.readouterr().out
    assert "| size | fp32-whole | int2-sampled |" in out
    cell = r"[\d,]+ MiB / [\d.]+ s / fits"
    assert re.search(rf"^\| 5k \| {cell} \| {cell} \|$", out, re.MULTILINE)
    # Recall@20, NDCG@20, then the most-popular ranking's Recall@20 on the same users
    assert re.search(
        r"^\| 5k \| int2-sampled \| 1 \| 0\.\d{4} \| 0\.\d{4} \| 0\.\d{4} \|", out, re.MULTILINE
    )
    assert not md.exists()


def test_default_modes_are_the_five_the_issue_names_and_the_rest_add_one_flag():
    assert DEFAULT_MODES == [
        "fp32-whole", "int2-whole", "int2-sampled", "int2-partitioned", "int2-offloaded",
    ]  # fmt: skip
    assert bench_scale.parse_args([]).modes == DEFAULT_MODES
    for state in ("bfloat16", "rowwise"):
        for mode in ("fp32-whole", "int2-whole"):
            assert MODES[f"{mode}-adam-{state}"] == [*MODES[mode], "--adam-state", state]
    for mode in ("int2-sampled", "int2-offloaded"):
        assert MODES[f"{mode}-adam-bfloat16"] == [*MODES[mode], "--adam-state", "bfloat16"]
    sparse = [*MODES["int2-sampled"], "--sparse-adam"]
    assert MODES["int2-sampled-sparse-adam"] == sparse
    assert MODES["int2-sampled-sparse-adam-bfloat16"] == [*sparse, "--adam-state", "bfloat16"]


def test_bad_memory_limit_exits_2_with_the_form(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_scale.main(["--memory-limit", "lots", "--no-write"])
    assert exit_info.value.code == 2
    assert "300MB" in capsys.readouterr().err


def test_training_text_sets_recall_beside_most_popular_and_random_or_says_it_was_not_run():
    ingests = [{"size": "1m", "n_items": 25_000}]
    trainings = [
        {"size": "1m", "mode": "int2-sampled", "fits": True, "epochs": 2, "recall@20": 0.0512,
         "ndcg@20": 0.0301, "popular_recall@20": 0.0207, "peak_rss_bytes": 1500 * 2**20,
         "minutes": 7.25},
        {"size": "1m", "mode": "fp32-whole", "fits": False, "failure": "allocation failed"},
    ]  # fmt: skip
    text = training_text(trainings, ingests, {"train_epochs": 2})
    assert "| 1m | int2-sampled | 2 | 0.0512 | 0.0301 | 0.0207 | 0.000800 | 1,500 | 7.2 |" in text
    assert "| 1m | fp32-whole | - | does not fit (allocation failed) |" in text
    assert "2 epoch(s), every batch," in text
    assert "not run" in training_text([], ingests, {"train_epochs": 0})
    assert "of a seeded sample of at most 20,000 users" in eval_users_text({"eval_users": 20000})
    assert eval_users_text({"eval_users": 0}) == " of every user"
    capped = training_text(trainings, ingests, {"train_epochs": 1, "train_max_batches": 1500})
    assert "1 epoch(s), the first 1,500 CF batches of each," in capped


@pytest.mark.parametrize(
    ("device", "modes", "warmed"),
    [
        ("cuda", ["fp32-whole", "int2-sampled", "int2-whole"], ["int2-sampled"]),
        ("cuda", ["fp32-whole"], []),
        ("cpu", ["int2-whole"], []),  # no Triton compile to keep out of the figures
    ],
)
def test_on_cuda_the_first_compressed_mode_warms_the_kernels_unreported(
    device, modes, warmed, tmp_path, monkeypatch
):
    calls = []
    monkeypatch.setattr(
        bench_scale, "train_child", lambda mode, data, out, args, flags: calls.append((mode, flags))
    )
    args = argparse.Namespace(device=device, modes=modes)
    bench_scale.warm_up_kernels(tmp_path / "data", tmp_path, args)
    assert [mode for mode, _ in calls] == warmed
    assert all(flags == ["--epochs", "1", "--max-batches-per-epoch", "1"] for _, flags in calls)


def test_int2_is_compared_with_fp32_at_its_own_adam_state_where_both_fit():
    results = [
        fake("10m", "fp32-whole", 6000),
        fake("10m", "int2-whole", 2400),
        fake("10m", "fp32-whole-adam-rowwise", 5400),
        fake("10m", "int2-whole-adam-rowwise", 1800),
        fake("10m", "int2-whole-adam-bfloat16", 2100),  # no FP32 at bfloat16: no row
        fake("20m", "fp32-whole", None),  # FP32 did not fit: no row
        fake("20m", "int2-whole", 4000),
    ]
    table = same_state_ratios(results, ["10m", "20m"]).splitlines()
    assert table[2:] == [
        "| size | Adam state | FP32 MiB | INT2 MiB | INT2 / FP32 |",
        "| --- | --- | --- | --- | --- |",
        "| 10m | float32 | 6,000 | 2,400 | 0.40 |",
        "| 10m | rowwise | 5,400 | 1,800 | 0.33 |",
    ]
    assert same_state_ratios(FAKE, ["100k", "1m", "10m"]) is None  # no whole-graph INT2 ran


ALTERNATING = ["int2-whole", "fp32-whole", "int2-sampled", "int2-offloaded"]
WITH_STATES = ["int2-whole", "fp32-whole-adam-rowwise", "int2-whole-adam-rowwise", "fp32-whole"]


@pytest.mark.parametrize(
    ("modes", "index", "expected"),
    [
        (ALTERNATING, 0, ["fp32-whole", "int2-whole", "int2-sampled", "int2-offloaded"]),
        (ALTERNATING, 1, ["fp32-whole", "int2-offloaded", "int2-sampled", "int2-whole"]),
        (["int2-whole", "int2-sampled"], 1, ["int2-sampled", "int2-whole"]),
        # every FP32 baseline first, one per Adam state
        (
            WITH_STATES,
            1,
            ["fp32-whole-adam-rowwise", "fp32-whole", "int2-whole-adam-rowwise", "int2-whole"],
        ),
    ],
)
def test_fp32_runs_first_at_every_size_and_the_rest_alternate(modes, index, expected):
    assert bench_scale.mode_order(modes, index) == expected


def test_a_section_tag_writes_its_own_section_and_figure_beside_the_full_one(tmp_path, monkeypatch):
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("<!-- begin:scale-cpu -->\nthe full run\n<!-- end:scale-cpu -->\n")
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    monkeypatch.setenv("TINYKG_FIGURES_DIR", str(tmp_path / "figures"))
    argv = ["--sizes", "5k", "--modes", "fp32-whole", "--steps", "1", "--device", "cpu",
            "--memory-limit", "3GB", "--work-dir", str(tmp_path / "work"),
            "--section-tag", "whole-5k"]  # fmt: skip
    assert bench_scale.main(argv) == 0
    text = md.read_text()
    assert "<!-- begin:scale-cpu -->\nthe full run\n<!-- end:scale-cpu -->" in text
    assert "<!-- begin:scale-whole-5k-cpu -->" in text
    assert "scale-whole-5k-cpu.png" in text
    assert (tmp_path / "figures" / "scale-whole-5k-cpu.png").is_file()


def test_set_reaches_every_training_child_and_the_report_names_it(tmp_path, monkeypatch):
    commands = []

    def over_the_limit(command, log, limit):
        commands.append(command)
        raise bench_scale.OutOfMemory("resident set over the limit")

    monkeypatch.setattr(bench_scale, "run_child", over_the_limit)
    args = bench_scale.parse_args(
        ["--set", "embed_dim=32", "--set", " lr = 0.005", "--device", "cpu", "--no-write"]
    )
    assert bench_scale.train("int2-whole", tmp_path, tmp_path / "out", args, 1000)["fits"] is False
    command = commands[0]
    settings = yaml.safe_load(Path(command[command.index("--config") + 1]).read_text())
    assert settings == {"embed_dim": 32, "lr": 0.005}  # read as the child's --config
    text = report([], [], ["int2-whole"], {"model": "kgat", "steps": 3, "threads": 1,
                  "sets": args.set, "memory_limit_text": "16GB"}, None)  # fmt: skip
    assert "--no-mlflow` and a `--config` file of `embed_dim=32`, `lr=0.005`, then" in text
    for bad in ("embed_dim", "embed_size=32"):
        with pytest.raises(SystemExit) as exit_info:
            bench_scale.parse_args(["--set", bad])
        assert exit_info.value.code == 2
