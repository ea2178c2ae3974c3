"""benchmarks.merge_sections: sections measured elsewhere replace ours verbatim, others stay."""

from __future__ import annotations

import pytest

from benchmarks.merge_sections import main, merge, sections

OURS = "# Benchmarks\n\n<!-- begin:a -->\nold a\n<!-- end:a -->\n\n<!-- begin:b -->\nb here\n<!-- end:b -->\n"
THEIRS = "# Benchmarks\n\n<!-- begin:a -->\nnew a\n<!-- end:a -->\n\n<!-- begin:b -->\nb there\n<!-- end:b -->\n\n<!-- begin:gpu -->\ngpu\n<!-- end:gpu -->\n"


def test_named_sections_replace_ours_and_new_ones_are_appended():
    merged, copied = merge(OURS, THEIRS, ["a", "gpu"])
    assert copied == ["a", "gpu"]
    assert sections(merged) == {
        "a": "<!-- begin:a -->\nnew a\n<!-- end:a -->",
        "b": "<!-- begin:b -->\nb here\n<!-- end:b -->",
        "gpu": "<!-- begin:gpu -->\ngpu\n<!-- end:gpu -->",
    }


def test_without_names_every_differing_section_is_copied():
    merged, copied = merge(OURS, THEIRS, None)
    assert copied == ["a", "b", "gpu"] and sections(merged) == sections(THEIRS)
    assert merge(merged, THEIRS, None)[1] == []


def test_an_unknown_section_is_refused(tmp_path, monkeypatch, capsys):
    ours, theirs = tmp_path / "BENCHMARKS.md", tmp_path / "other.md"
    ours.write_text(OURS)
    theirs.write_text(THEIRS)
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(ours))
    with pytest.raises(SystemExit, match="no section nope"):
        main([str(theirs), "nope"])
    assert ours.read_text() == OURS
    assert main([str(theirs), "gpu"]) == 0 and "gpu" in sections(ours.read_text())
    assert main([str(tmp_path / "missing.md")]) == 2
