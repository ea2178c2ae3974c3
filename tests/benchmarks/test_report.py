"""benchmarks/_report.py: where figures go, and the section a benchmark writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks._report import figures_dir_for, markdown_table, publish_section, write_section


def test_figures_go_to_the_redirected_dir_only_when_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("TINYKG_FIGURES_DIR", str(tmp_path / "figures"))
    assert figures_dir_for(write=False) is None and not (tmp_path / "figures").exists()
    assert figures_dir_for(write=True) == tmp_path / "figures"
    assert (tmp_path / "figures").is_dir()


def test_a_section_is_replaced_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    write_section("a", "A", "first", command="python -m benchmarks.a")
    write_section("b", "B", markdown_table(["x", "y"], [[1, "2.0"]]), command="b")
    md.write_text(md.read_text() + "\nA note between sections stays.\n")
    write_section("a", "A", "second", command="python -m benchmarks.a --again")
    text = md.read_text()
    assert text.count("<!-- begin:a -->") == 1 and "second" in text and "first" not in text
    assert "- command: `python -m benchmarks.a --again`" in text
    assert "| x | y |\n| --- | --- |\n| 1 | 2.0 |" in text
    assert text.index("<!-- begin:a -->") < text.index("<!-- begin:b -->")
    assert text.endswith("A note between sections stays.\n")


def test_publish_section_writes_and_says_where_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    assert publish_section("a", "A", "body", write=False) is None
    assert not md.exists() and capsys.readouterr().out == ""
    assert publish_section("a", "A", "body", write=True) == md
    assert capsys.readouterr().out == f"wrote section 'a' of {md}\n"
    assert "<!-- begin:a -->\n## A\n" in md.read_text() and "body\n<!-- end:a -->" in md.read_text()
