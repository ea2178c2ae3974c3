"""benchmarks/peak_by_node.py: one CF step's live bytes per autograd node, the nodes ranked; bad input
one line and exit status 2."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from benchmarks.peak_by_node import main, node_of, peaks_by_node


def test_allocations_go_to_the_innermost_node_and_each_keeps_its_highest_total():
    node = "autograd::engine::evaluate_function: "
    events = [
        (1, 100, ("forward", "aten::mm")),  # forward: the innermost op that is not aten
        (2, 50, ("forward", f"{node}MulBackward0", "aten::mul")),
        (3, -120, ("forward", f"{node}MulBackward0")),
        (4, 400, (f"{node}AddBackward0", "aten::add")),
        (5, -400, (f"{node}AddBackward0",)),
    ]
    assert node_of(events[1][2]) == "MulBackward0" and node_of(()) == "(outside any op)"
    assert peaks_by_node(events) == [("forward", 100), ("MulBackward0", 150), ("AddBackward0", 430)]


def test_a_kgat_step_lists_its_backward_nodes_largest_first(tiny_dataset_dir: Path, capsys):
    assert main(["--dataset", str(tiny_dataset_dir), "--model", "kgat", "--rows", "40"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("kgat bits 2: MiB live")
    names = [line.split()[1] for line in lines[1:]]
    values = [float(line.split()[0]) for line in lines[1:]]
    assert "PropagatedBiInteractionBackward" in names and "L2NormalizeBackward" in names
    assert values == sorted(values, reverse=True) and values[0] > 0


def test_gpu_blocks_cut_the_step_as_a_gpu_would(tiny_dataset_dir: Path, monkeypatch, capsys):
    from tinykg_train.compress import blocks

    budgets = []
    real = blocks.device_budget

    def recording(block_bytes, device, total_bytes):
        budgets.append((real(block_bytes, device, total_bytes), blocks._budget_device))
        return budgets[-1][0]

    monkeypatch.setattr(blocks, "device_budget", recording)
    layer_op = importlib.import_module("tinykg_train.compress.ops.propagated_bi_interaction")
    monkeypatch.setattr(layer_op, "device_budget", recording)
    argv = ["--dataset", str(tiny_dataset_dir), "--model", "kgat", "--gpu-blocks"]
    assert main(argv) == 0
    assert budgets and all(device == "cuda" for _, device in budgets)
    assert blocks._budget_device is None  # restored after the run
    assert "PropagatedBiInteractionBackward" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rows", "0"], "--rows needs to be at least 1"),
        (["--dataset", "no-such-dataset"], "dataset 'no-such-dataset'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
