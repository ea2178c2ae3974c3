"""benchmarks/bench_matrix.py: widths of a group train side by side with their epochs taking turns,
the report says per cell whether a paired interval shows the width within 1% of FP32, finished runs
are read back, and a width added later is timed against a throwaway FP32 training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks._matrix_report import (
    Cell,
    Key,
    mode_table,
    paired_interval,
    popularity_lines,
    same_round_ratios,
)
from benchmarks.bench_matrix import main


def cell(recalls: dict[int, float]) -> Cell:
    return Cell(runs={seed: {"recall@20": r} for seed, r in recalls.items()})


def test_paired_interval_is_the_t_interval_of_same_seed_differences_over_fp32s_mean():
    base = cell({0: 0.30, 1: 0.20, 2: 0.25})
    width = cell({0: 0.31, 1: 0.20, 2: 0.26})
    interval = paired_interval(width, base, "recall@20")
    # differences 0.01, 0.00, 0.01: mean 0.006667, sd 0.005774, t(2) = 4.303
    half = 4.303 * 0.0057735 / 3**0.5
    assert interval.ratio == pytest.approx(1 + 0.0066667 / 0.25, abs=1e-6)
    assert interval.low == pytest.approx(1 + (0.0066667 - half) / 0.25, abs=1e-5)
    assert interval.high == pytest.approx(1 + (0.0066667 + half) / 0.25, abs=1e-5)
    assert interval.verdict == "unclear"  # 0.967 .. 1.087: three seeds cannot tell


def test_verdicts_follow_where_the_interval_lies():
    base = cell({0: 0.30, 1: 0.20, 2: 0.25})
    assert (
        paired_interval(cell({0: 0.301, 1: 0.2005, 2: 0.2502}), base, "recall@20").verdict == "yes"
    )
    assert paired_interval(cell({0: 0.27, 1: 0.18, 2: 0.224}), base, "recall@20").verdict == "no"
    assert paired_interval(cell({0: 0.30}), cell({0: 0.3}), "recall@20").verdict == "one seed"


def test_the_most_popular_bar_is_given_per_dataset_with_its_spread_over_sampled_users():
    def popular(*values):
        return Cell(runs={i: {"most_popular": {"recall@20": v}} for i, v in enumerate(values)})

    cells = {
        Key("b", "whole", "kgat", "32"): popular(0.2, 0.2),
        Key("b", "whole", "kgat", "2"): popular(0.2),
        Key("a", "whole", "kgat", "32"): popular(0.1, 0.3),
        Key("a", "whole", "kgat", "2"): Cell(runs={0: {"recall@20": 0.4}}),  # recorded before it
        Key("c", "whole", "kgat", "32"): Cell(runs={0: {"recall@20": 0.4}}),
    }
    assert popularity_lines(cells) == [
        "- a: the most-popular ranking (items by training count, no model) reads test Recall@20 "
        "**0.2000** (runs 0.1000 to 0.3000: sampled users) on the same users",
        "- b: the most-popular ranking (items by training count, no model) reads test Recall@20 "
        "**0.2000** on the same users",
    ]


def test_epoch_ratios_pair_only_rounds_where_both_widths_ran():
    rounds = [{"32": 1.0, "2": 1.1}, {"2": 5.0}, {"32": 2.0, "2": 2.4}]
    assert same_round_ratios(rounds, "2") == pytest.approx([1.1, 1.2])


def test_other_modes_are_compared_with_whole_graph_runs_of_the_same_width_and_seed():
    recalls = {0: 0.30, 1: 0.20, 2: 0.25}
    cells = {
        Key("d", "whole", "kgat", "2"): cell(recalls),
        Key("d", "whole", "kgat", "32"): cell({s: r + 0.1 for s, r in recalls.items()}),
        Key("d", "sampled", "kgat", "2"): cell({0: 0.27, 1: 0.18, 2: 0.224}),  # 10% below
        Key("d", "sampled", "kgin", "2"): cell(recalls),  # no whole-graph KGIN cell
    }
    for c in cells.values():
        for run in c.runs.values():
            run.update({"ndcg@20": run["recall@20"] / 2, "peak_rss_bytes": 2**20})
    table = mode_table(cells)
    rows = [line for line in table.splitlines() if line.startswith("| d ")]
    # against whole's INT2 (0.25 mean), not its FP32 (0.35): 0.9, clearly below
    assert rows == ["| d | sampled | kgat | INT2 | 3 | 0.899 [0.849, 0.949] | no | "
                    "0.899 [0.849, 0.949] | 1.00 |"]  # fmt: skip
    assert mode_table({k: c for k, c in cells.items() if k.mode == "whole"}) == ""


def write_plan(path: Path, data: Path, widths: list) -> Path:
    plan = {
        "datasets": {"tiny": {"path": str(data)}},
        "models": ["kgat"],
        "widths": widths,
        "seeds": [0, 1],
        "modes": {"whole": {}},
        "train": {"epochs": 2, "max_batches_per_epoch": 2, "embed_dim": 8, "n_layers": 1,
                  "device": "cpu", "patience": 5},
    }  # fmt: skip
    path.write_text(json.dumps(plan))  # JSON is YAML
    return path


def test_matrix_trains_side_by_side_reports_and_times_a_later_width_against_fp32(
    tiny_dataset_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    md, out = tmp_path / "BENCHMARKS.md", tmp_path / "runs"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    monkeypatch.setenv("TINYKG_FIGURES_DIR", str(tmp_path / "figures"))
    plan = write_plan(tmp_path / "plan.yaml", tiny_dataset_dir, [32, 2])
    assert main(["--plan", str(plan), "--out", str(out)]) == 0

    group = out / "tiny" / "whole" / "kgat"
    for width in ("fp32", "int2"):
        for seed in (0, 1):
            metrics = json.loads((group / width / f"seed{seed}" / "metrics.json").read_text())
            assert metrics["epochs_trained"] == 2 and metrics["seed"] == seed
    rounds = json.loads((group / "seed0-timing.json").read_text())
    assert [sorted(r) for r in rounds] == [["2", "32"], ["2", "32"]]  # one epoch each, in turns
    text = md.read_text()
    assert (
        "<!-- begin:accuracy-matrix-tiny-cpu -->" in text  # one dataset: its own section
        and "| tiny | whole | kgat | INT2 | 2 |" in text
    )
    assert (tmp_path / "figures" / "accuracy-matrix-tiny-cpu.png").is_file()
    popular = metrics["most_popular"]["recall@20"]  # every run ranks the same (all) test users
    bar = f"reads test Recall@20 **{popular:.4f}** on the same users"
    assert f"- tiny: the most-popular ranking (items by training count, no model) {bar}" in text

    finished = (group / "int2" / "seed0" / "metrics.json").stat().st_mtime_ns
    plan = write_plan(tmp_path / "plan.yaml", tiny_dataset_dir, [32, 2, 4])
    assert main(["--plan", str(plan), "--out", str(out)]) == 0
    assert (group / "int2" / "seed0" / "metrics.json").stat().st_mtime_ns == finished  # read back
    assert (group / "int4" / "seed1" / "metrics.json").is_file()
    rounds = json.loads((group / "seed1-timing.json").read_text())
    # the new width's epochs ran in turns with a throwaway FP32 training (FP32 itself had finished)
    assert [sorted(r) for r in rounds[2:]] == [["32", "4"], ["32", "4"]]
    assert "| tiny | whole | kgat | INT4 | 2 |" in md.read_text()


def test_a_run_dir_with_other_settings_stops_the_matrix(tiny_dataset_dir: Path, tmp_path: Path):
    out = tmp_path / "runs"
    plan = write_plan(tmp_path / "plan.yaml", tiny_dataset_dir, [32])
    assert main(["--plan", str(plan), "--out", str(out), "--seeds", "0", "--no-write"]) == 0
    with pytest.raises(SystemExit, match="holds a run with other settings .*lr"):
        main(
            [
                "--plan",
                str(plan),
                "--out",
                str(out),
                "--seeds",
                "0",
                "--set",
                "lr=0.01",
                "--no-write",
            ]
        )


def test_the_a_a_control_is_the_int2_path_with_every_phase_exact(tmp_path: Path):
    from benchmarks._matrix_report import width_label, width_order
    from benchmarks.bench_matrix import Group, usable_configs

    plan = {"datasets": {"d": {}}, "modes": {"whole": {}}, "train": {"epochs": 1}}
    for model, phases in (("kgat", ("cf", "kg")), ("lightgcn", ("cf",))):
        group = Group("d", "whole", model, 0)
        configs = usable_configs(group, ["32", "2", "aa"], tmp_path, plan, {}, tmp_path)
        control = configs["aa"]
        assert (control.bits, control.exact_phases) == (2, phases)
        assert configs["2"].exact_phases == () and control.out.endswith("aa/seed0")
    assert width_label("aa") == "A/A"
    assert sorted(["2", "aa", "32", "auto"], key=width_order) == ["32", "aa", "2", "auto"]


def test_the_shipped_plan_builds_every_width_of_every_model_with_the_control_by_default(
    tmp_path: Path,
):
    from benchmarks.bench_matrix import PLAN, Group, read_plan, usable_configs

    plan = read_plan(PLAN)
    assert {"32", "2", "auto", "aa"} <= {str(width) for width in plan["widths"]}
    widths = [str(width) for width in plan["widths"]]
    for model in plan["models"]:
        group = Group("music-kgcn", "whole", model, 0)
        assert list(usable_configs(group, widths, tmp_path, plan, {}, tmp_path)) == widths


def test_a_width_a_mode_refuses_is_left_out_and_fp32_s_refusal_stops_the_matrix(tmp_path: Path):
    from benchmarks.bench_matrix import Group, usable_configs
    from tinykg_train.errors import ConfigError

    plan = {
        "datasets": {"d": {}},
        "modes": {"whole": {}, "sampled": {"sampler": "neighbor"}},
        "train": {"epochs": 1},
    }
    whole, sampled = Group("d", "whole", "kgat", 0), Group("d", "sampled", "kgat", 0)
    assert set(usable_configs(whole, ["32", "2", "auto"], tmp_path, plan, {}, tmp_path)) == {
        "32", "2", "auto",
    }  # fmt: skip
    assert set(usable_configs(sampled, ["32", "2", "auto"], tmp_path, plan, {}, tmp_path)) == {
        "32", "2",
    }  # fmt: skip
    plan["modes"]["sampled"]["fanouts"] = [5]  # one count for three layers: every width refuses
    with pytest.raises(ConfigError, match="'fanouts' needs one count per layer"):
        usable_configs(sampled, ["32", "2"], tmp_path, plan, {}, tmp_path)
