"""benchmarks.merge_sections: sections measured elsewhere replace ours verbatim, others stay."""

from __future__ import annotations

import pytest

from benchmarks.merge_sections import main, merge, sections

A, B, GPU = "kernels-cpu", "memory-lfm1m-kgat-cpu", "kernels-cuda"


def block(name: str, text: str) -> str:
    return f"<!-- begin:{name} -->\n{text}\n<!-- end:{name} -->"


OURS = f"# Benchmarks\n\n{block(A, 'old a')}\n\n{block(B, 'b here')}\n"
THEIRS = f"# Benchmarks\n\n{block(A, 'new a')}\n\n{block(B, 'b there')}\n\n{block(GPU, 'gpu')}\n"


def test_named_sections_replace_ours_and_new_ones_go_in_their_place():
    merged, copied = merge(OURS, THEIRS, [A, GPU])
    assert copied == [A, GPU]
    assert sections(merged) == {A: block(A, "new a"), GPU: block(GPU, "gpu"), B: block(B, "b here")}
    assert list(sections(merged)) == [A, GPU, B]  # kernels before memory


def test_without_names_every_differing_section_is_copied():
    merged, copied = merge(OURS, THEIRS, None)
    assert copied == [A, B, GPU] and sections(merged) == sections(THEIRS)
    assert merge(merged, THEIRS, None)[1] == []


def test_a_section_named_outside_the_rule_is_not_copied():
    theirs = THEIRS + "\n" + block("accuracy-cpu-kgat-final", "ad hoc") + "\n"
    with pytest.raises(SystemExit, match="'accuracy-cpu-kgat-final' does not follow"):
        merge(OURS, theirs, None)


def test_an_unknown_section_is_refused(tmp_path, monkeypatch, capsys):
    ours, theirs = tmp_path / "BENCHMARKS.md", tmp_path / "other.md"
    ours.write_text(OURS)
    theirs.write_text(THEIRS)
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(ours))
    with pytest.raises(SystemExit, match="no section nope"):
        main([str(theirs), "nope"])
    assert ours.read_text() == OURS
    assert main([str(theirs), GPU]) == 0 and GPU in sections(ours.read_text())
    assert main([str(tmp_path / "missing.md")]) == 2
