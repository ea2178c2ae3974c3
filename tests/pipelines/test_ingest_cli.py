"""python -m pipelines.ingest: every bad input exits 2 with one line (file:line: problem), leaves nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines._cli import run_cli
from pipelines.ingest import main

KGAT = {"train.txt": "0 0 1\n1 1 2\n", "test.txt": "0 2\n1 0\n", "kg_final.txt": "0 0 3\n1 1 3\n2 0 4\n"}
KGCN = {"ratings_final.txt": "0\t0\t1\n0\t1\t0\n1\t2\t1\n", "kg_final.txt": "0\t0\t3\n1\t0\t3\n"}
RECBOLE = {
    "toy.inter": "user_id:token\titem_id:token\n1\t2\n",
    "toy.kg": "head_id:token\trelation_id:token\ttail_id:token\na\tr\tb\n",
    "toy.link": "item_id:token\tentity_id:token\n2\ta\n",
}


def make_dir(root: Path, files: dict[str, str | bytes | None]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        if content is None:
            continue
        (root / name).write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = run_cli(main, argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# (case id, raw files (None: no raw dir at all), message the one error line must contain)
ERROR_CASES = [
    ("missing-dir", None, "raw: no such directory"),
    ("empty-dir", {}, "raw: directory holds no files"),
    ("unknown-format", {"notes.md": "hello\n", "data.json": "{}"}, "raw: unknown format: found data.json, notes.md"),
    ("kgat-without-kg_final", {**KGAT, "kg_final.txt": None}, "raw/kg_final.txt: missing required file (a KGAT dir needs"),
    ("kgcn-without-kg_final", {**KGCN, "kg_final.txt": None}, "raw/kg_final.txt: missing required file (a KGCN dir needs"),
    ("empty-required-file", {**KGAT, "train.txt": ""}, "raw/train.txt: file is empty"),
    ("non-integer-id", {**KGAT, "train.txt": "0 0 1\n1 one 2\n"}, "raw/train.txt:2: item (field 2) 'one' is not an integer id"),
    ("negative-id", {**KGAT, "kg_final.txt": "0 0 3\n1 1 3\n-2 0 4\n"}, "raw/kg_final.txt:3: head is negative (-2)"),
    ("wrong-column-count", {**KGAT, "kg_final.txt": "0 0 3\n1 1\n"}, "raw/kg_final.txt:2: expected 3 fields (head relation tail), found 2"),
    ("kgcn-bad-label", {**KGCN, "ratings_final.txt": "0\t0\t1\n0\t1\t3\n"}, "raw/ratings_final.txt:2: label 3 is not 0 or 1"),
    ("recbole-untyped-header", {**RECBOLE, "toy.kg": "head_id\trelation_id\ttail_id\na\tr\tb\n"}, "raw/toy.kg:1: no RecBole typed header"),
    ("binary-garbage-nul", {**KGAT, "kg_final.txt": b"0 0 3\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"}, "raw/kg_final.txt:4: binary data (NUL byte)"),
    ("binary-garbage-no-nul", {**KGAT, "test.txt": b"0 2\n\xc3\x28\xa0\xa1 \xff\n"}, "raw/test.txt:2: user '"),
    ("crlf-and-blank-lines-keep-line-numbers", {**KGAT, "kg_final.txt": "0 0 3\r\n\r\n\r\n1 1 x\r\n"}, "raw/kg_final.txt:4: tail 'x' is not an integer id"),
]


@pytest.mark.parametrize(("files", "message"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_bad_input_exits_2_with_one_line_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict | None, message: str
) -> None:
    raw = tmp_path / "raw"
    if files is not None:
        make_dir(raw, files)
    out_parent = tmp_path / "data"
    out_parent.mkdir()
    code, out, err = run([str(raw), "--out", str(out_parent / "ds"), "--no-progress"], capsys)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert message.replace("raw", str(raw), 1) in lines[0], lines[0]
    assert list(out_parent.iterdir()) == []  # no DIR, no temporary sibling


def test_existing_out_needs_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = make_dir(tmp_path / "raw", KGAT)
    out = tmp_path / "ds"
    assert run([str(raw), "--out", str(out)], capsys)[0] == 0
    code, _, err = run([str(raw), "--out", str(out)], capsys)
    assert code == 2 and err.strip() == f"error: {out} already exists; pass --overwrite to replace it, or choose another --out"
    assert run([str(raw), "--out", str(out), "--overwrite"], capsys)[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "raw"]


def test_success_prints_the_stats_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = make_dir(tmp_path / "raw", {**KGCN, "ratings_final.txt": "".join(f"{u}\t{i}\t{1 - i % 2}\n" for u in range(5) for i in range(40))})
    code, out, err = run([str(raw), "--out", str(tmp_path / "ds"), "--seed", "3", "--split-ratios", "0.6,0.2,0.2"], capsys)
    assert code == 0, err
    table = dict(line.rsplit(None, 1) for line in out.splitlines()[1:])
    table = {key.strip(): value for key, value in table.items()}
    assert table["format"] == "kgcn"
    assert table["users"] == "5" and table["items"] == "40"
    assert (table["interactions train"], table["interactions valid"], table["interactions test"]) == ("60", "20", "20")
    assert table["dropped: negative_samples"] == "100"
    assert table["split"] == "per_user_random"
    assert table["split ratios"] == "0.6/0.2/0.2" and table["split rounding"] == "half-up"
    assert int(table["peak RSS (MiB)"].replace(",", "")) > 10  # this process's peak: Python, Polars, the data


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--split-ratios", "0.8,0.1"], "error: split ratios need to be three numbers >= 0 like 0.8,0.1,0.1 (got (0.8, 0.1))"),
        (["--split-ratios", "a,b,c"], "error: --split-ratios needs three numbers like 0.8,0.1,0.1 (got 'a,b,c')"),
        (["--split-ratios", "0.5,0.4,0.4"], "error: split ratios need to sum to 1"),
        (["--split", "sideways"], "error: split method 'sideways' is unknown; choose one of auto, random, time"),
        (["--split", "0.8,0.1,0.1"], "give the shares as split ratios (--split-ratios 0.8,0.1,0.1)"),
        (["--split-rounding", "up"], "error: split rounding 'up' is unknown; choose half-up (ingest's) or down (RecBole's)"),
        (["--split", "time"], "error: split method 'time' needs a timestamp on every interaction, but 6 of 6 have none (kgat data)"),
    ],
)
def test_bad_split_argument_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    raw = make_dir(tmp_path / "raw", KGAT)
    code, out, err = run([str(raw), "--out", str(tmp_path / "ds"), *args], capsys)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "ds").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


def test_split_flags_reach_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """KGAT data keeps its own splits by default; --split random re-splits it per user, RecBole's way."""
    ratings = "".join(f"{u}\t{i}\t1\n" for u in range(4) for i in range(u * 3, u * 3 + 3 + u))  # degrees 3, 4, 5, 6
    raw = make_dir(tmp_path / "raw", {**KGCN, "ratings_final.txt": ratings, "kg_final.txt": "0\t0\t20\n4\t0\t20\n8\t1\t21\n"})
    args = ["--split", "random", "--split-ratios", "0.6,0.2,0.2", "--split-rounding", "down", "--seed", "5", "--drop-unlinked-items"]
    code, out, err = run([str(raw), "--out", str(tmp_path / "ds"), *args], capsys)
    assert code == 0, err
    meta = json.loads((tmp_path / "ds" / "metadata.json").read_text())
    assert meta["split"] == {
        "method": "per_user_random", "requested": "random", "ratios": {"train": 0.6, "valid": 0.2, "test": 0.2},
        "rounding": "down", "seed": 5, "drop_unlinked_items": True,
    }
    # linked items (in a triple): 0, 4, 8; user 0 has 0..2, user 1 3..6, user 2 6..10, user 3 9..14
    assert meta["dropped"]["interactions_with_items_without_triples"] == 18 - 3
    assert "dropped: interactions_with_items_without_triples" in out
    given = make_dir(tmp_path / "kgat", KGAT)
    assert run([str(given), "--out", str(tmp_path / "k1")], capsys)[0] == 0
    assert json.loads((tmp_path / "k1" / "metadata.json").read_text())["split"]["method"] == "given"
    assert run([str(given), "--out", str(tmp_path / "k2"), "--split", "random"], capsys)[0] == 0
    assert json.loads((tmp_path / "k2" / "metadata.json").read_text())["split"]["method"] == "per_user_random"


def test_module_runs_as_a_script(tmp_path: Path, repo_root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(repo_root), os.environ.get("PYTHONPATH", "")) if p)}
    helped = subprocess.run([sys.executable, "-m", "pipelines.ingest", "--help"], capture_output=True, text=True, cwd=repo_root, env=env)
    assert helped.returncode == 0 and "--overwrite" in helped.stdout
    failed = subprocess.run(
        [sys.executable, "-m", "pipelines.ingest", str(tmp_path / "nope"), "--out", str(tmp_path / "ds")],
        capture_output=True, text=True, cwd=repo_root, env=env,
    )
    assert failed.returncode == 2
    assert failed.stderr.strip() == f"error: {tmp_path / 'nope'}: no such directory; give the folder that holds the raw files"
