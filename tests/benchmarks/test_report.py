"""benchmarks/_report.py: where figures go, the section a benchmark writes and its name (one per
benchmark, dataset and device; a re-run replaces it), and BENCHMARKS.md following that rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks._report import (
    BENCHMARKS,
    REPO_ROOT,
    figures_dir_for,
    markdown_table,
    parse_section_name,
    publish_section,
    section_name,
    section_order,
    widest_vector_extension,
    write_section,
)
from benchmarks.merge_sections import sections


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
    a, b = "ingest-cpu", "memory-lfm1m-kgat-cpu"
    write_section(a, "A", "first", command="python -m benchmarks.a")
    write_section(b, "B", markdown_table(["x", "y"], [[1, "2.0"]]), command="b")
    md.write_text(md.read_text() + "\nA note between sections stays.\n")
    write_section(a, "A", "second", command="python -m benchmarks.a --again")
    text = md.read_text()
    assert text.count(f"<!-- begin:{a} -->") == 1 and "second" in text and "first" not in text
    assert "- command: `python -m benchmarks.a --again`" in text
    assert "| x | y |\n| --- | --- |\n| 1 | 2.0 |" in text
    assert text.index(f"<!-- begin:{a} -->") < text.index(f"<!-- begin:{b} -->")
    assert text.endswith("A note between sections stays.\n")


def test_a_new_section_goes_where_its_benchmark_s_sections_are(tmp_path: Path, monkeypatch):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    for name in ("epoch-time-music-kgcn-cpu", "kernels-cpu", "accuracy-music-kgcn-cpu"):
        write_section(name, name, "body", command="c")
    write_section("kernels-cuda", "K", "body", command="c")
    write_section("accuracy-lfm1m-kgat-cuda", "A", "body", command="c")
    assert list(sections(md.read_text())) == [
        "kernels-cpu",
        "kernels-cuda",
        "accuracy-lfm1m-kgat-cuda",
        "accuracy-music-kgcn-cpu",
        "epoch-time-music-kgcn-cpu",
    ]


def test_section_names_come_from_benchmark_dataset_and_device():
    assert section_name("accuracy", "cpu", "music-kgcn") == "accuracy-music-kgcn-cpu"
    assert section_name("gradient-error", "cpu", "lfm1m-kgat") == "gradient-error-lfm1m-kgat-cpu"
    assert section_name("kernels", "cuda") == "kernels-cuda"
    assert section_name("memory", "cpu", "My Data_v2") == "memory-my-data-v2-cpu"
    for benchmark in BENCHMARKS:
        for dataset in (None, "ml-100k-recbole"):
            name = section_name(benchmark, "cuda", dataset)
            assert parse_section_name(name) == (benchmark, dataset, "cuda")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: section_name("accuracy-final", "cpu"),
            "benchmark must be one of accuracy-matrix, ingest, ",
        ),
        (lambda: section_name("memory", "gpu"), "device must be one of cpu, cuda (got 'gpu')"),
        (lambda: section_name("memory", "cpu", "--"), "dataset '--' has no letter or digit"),
    ],
)
def test_names_outside_the_rule_are_refused(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


@pytest.mark.parametrize("name", ["accuracy-cpu-kgat-ten-seeds-final", "memory", "accuracy-Cpu"])
def test_a_free_form_section_is_never_written(name, tmp_path: Path, monkeypatch):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    with pytest.raises(ValueError, match=r"does not follow <benchmark>\[-<dataset>\]-<device>"):
        write_section(name, "T", "body")
    assert not md.exists()


def test_benchmarks_md_holds_one_section_per_benchmark_dataset_and_device():
    text = (REPO_ROOT / "BENCHMARKS.md").read_text()
    names = list(sections(text))
    keys = [parse_section_name(name) for name in names]  # every name follows the rule
    assert len(set(keys)) == len(keys) == text.count("<!-- begin:")
    assert names == sorted(names, key=section_order)  # the order write_section inserts in


def test_every_section_the_readme_and_docs_cite_is_in_benchmarks_md():
    """A figure quoted in the README or docs names the section it comes from; a section renamed,
    merged away or never written leaves the claim without its command, machine and date."""
    present = set(sections((REPO_ROOT / "BENCHMARKS.md").read_text()))
    docs = [REPO_ROOT / "README.md", *REPO_ROOT.glob("docs/*.md")]
    cited = {
        (doc.name, name)
        for doc in docs
        for name in re.findall(r"`([a-z0-9][a-z0-9-]*-(?:cpu|cuda))`", doc.read_text())
    }
    assert len(cited) > 30  # the pattern still finds the citations
    assert sorted((doc, name) for doc, name in cited if name not in present) == []


def test_every_figure_under_benchmarks_figures_is_used_and_every_used_one_exists():
    docs = [REPO_ROOT / "BENCHMARKS.md", REPO_ROOT / "README.md", *REPO_ROOT.glob("docs/*.md")]
    docs += REPO_ROOT.glob("packages/*/README.md")
    used = {
        m for doc in docs for m in re.findall(r"benchmarks/figures/([\w.-]+\.png)", doc.read_text())
    }
    present = {p.name for p in (REPO_ROOT / "benchmarks" / "figures").glob("*.png")}
    assert used == present


def test_publish_section_writes_and_says_where_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    md = tmp_path / "BENCHMARKS.md"
    monkeypatch.setenv("TINYKG_BENCHMARKS_MD", str(md))
    a = "kernels-cpu"
    assert publish_section(a, "A", "body", write=False) is None
    assert not md.exists() and capsys.readouterr().out == ""
    assert publish_section(a, "A", "body", write=True) == md
    assert capsys.readouterr().out == f"wrote section '{a}' of {md}\n"
    assert f"<!-- begin:{a} -->\n## A\n" in md.read_text()
    assert f"body\n<!-- end:{a} -->" in md.read_text()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ({"sse4_2", "avx", "avx2", "avx512f", "avx512bw"}, "AVX-512"),
        ({"sse4_2", "avx", "avx2", "fma"}, "AVX2"),
        ({"sse4_2"}, "SSE4.2"),
        ({"neon", "asimd"}, None),
    ],
)
def test_the_machine_line_names_the_widest_vector_extension(flags, named):
    """The same CPU model in a VM came with AVX-512 one week and AVX2 the next: the machine line
    must tell their figures apart."""
    assert widest_vector_extension(flags) == named
