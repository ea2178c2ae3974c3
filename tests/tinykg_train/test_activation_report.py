"""The per-module activation-memory table and chart."""

from __future__ import annotations

import csv

from tinykg_train.activation_report import write_activation_chart, write_activation_table


def test_table_is_sorted_with_shares_and_a_total(tmp_path):
    path = write_activation_table(tmp_path / "a.csv", {"conv.0": 100, "": 300, "conv.1": 600})
    rows = list(csv.reader(path.open()))
    assert rows == [
        ["module", "bytes", "share"],
        ["conv.1", "600", "0.6000"],
        ["(model)", "300", "0.3000"],
        ["conv.0", "100", "0.1000"],
        ["total", "1000", "1.0000"],
    ]


def test_chart_is_a_png(tmp_path):
    path = write_activation_chart(tmp_path / "a.png", {"conv.0": 100, "conv.1": 600}, "title")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
