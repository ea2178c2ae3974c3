"""Bulk text parsing: exact line numbers, both parse paths agree, bad tokens are named precisely."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kg_data.errors import IngestError
from kg_data.formats._text import (
    check_text_file,
    describe_id,
    read_delimited,
    read_fields,
    read_user_lines,
    scan_lines,
)


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


def test_scan_lines_keeps_blank_lines_and_strips_crlf(tmp_path: Path) -> None:
    path = write(tmp_path / "f.txt", "a b\r\n\r\nc\r\n")
    frame = scan_lines(path).collect()
    assert frame["line"].to_list() == [1, 2, 3]
    assert frame["text"].to_list() == ["a b", "", "c"]


@pytest.mark.parametrize(
    "content",
    [
        "1 2 3\n4 5 6\n",  # clean: the CSV fast path
        "1 2 3 \n4 5 6 \n",  # trailing spaces
        "1  2\t3\r\n\n4 5 6\r\n",  # runs of blanks, a tab, CRLF, a blank line
    ],
)
def test_read_fields_parses_quirky_and_clean_files_alike(tmp_path: Path, content: str) -> None:
    frame = read_fields(write(tmp_path / "kg.txt", content), ["h", "r", "t"], what="triples")
    assert frame.select("h", "r", "t").rows() == [(1, 2, 3), (4, 5, 6)]
    assert frame.schema["h"] == pl.Int64


def test_read_fields_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "kg.txt", "1 2 3\r\n\r\n4 5 6\r\n7 x 9\r\n")
    with pytest.raises(IngestError) as err:
        read_fields(path, ["head", "relation", "tail"], what="triples")
    assert err.value.line == 4
    assert str(err.value) == f"{path}:4: relation 'x' is not an integer id"


def test_read_fields_skips_header_lines_and_keeps_their_numbering(tmp_path: Path) -> None:
    path = write(tmp_path / "f.txt", "name id\nx 1\ny -2\n")
    with pytest.raises(IngestError, match=r":3: id is negative \(-2\)"):
        read_fields(path, ["name", "id"], ints=["id"], skip_lines=1, what="rows")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("1 2", "expected 3 fields (head relation tail), found 2"),
        ("1 2 3 4", "expected 3 fields (head relation tail), found 4"),
        ("1 2 -3", "tail is negative (-3); ids must be >= 0"),
        ("1 2 4294967296", "tail 4294967296 is too large"),
        ("1.5 2 3", "head '1.5' is not an integer id"),
    ],
)
def test_read_fields_describes_the_first_bad_row(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path / "kg.txt", f"0 0 1\n{line}\n0 0 2\n")
    with pytest.raises(IngestError) as err:
        read_fields(path, ["head", "relation", "tail"], what="triples")
    assert err.value.line == 2
    assert message in err.value.reason


def test_undecodable_bytes_are_a_bad_token_at_their_line(tmp_path: Path) -> None:
    path = write(tmp_path / "kg.txt", b"0 0 1\n0 0 1\n\xff\xfe 0 1\n")
    with pytest.raises(IngestError) as err:
        read_fields(path, ["head", "relation", "tail"], what="triples")
    assert err.value.line == 3
    assert "is not an integer id" in err.value.reason


def test_check_text_file_refuses_missing_empty_and_binary(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="missing required file"):
        check_text_file(tmp_path / "absent.txt", "rows")
    with pytest.raises(IngestError, match="file is empty"):
        check_text_file(write(tmp_path / "empty.txt", ""), "rows")
    with pytest.raises(IngestError) as err:
        check_text_file(write(tmp_path / "bin.txt", b"1 2 3\n4 5 6\nPK\x03\x04\x00\x00"), "rows")
    assert err.value.line == 3 and "binary data" in err.value.reason


def test_blank_only_file_has_no_data_rows(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="no data rows"):
        read_fields(write(tmp_path / "kg.txt", "\n  \n\r\n"), ["h", "r", "t"], what="triples")


def test_read_user_lines_explodes_lines_and_counts_lone_users(tmp_path: Path) -> None:
    path = write(tmp_path / "train.txt", "0 5 6 \r\n1\r\n\r\n2\t7  8\r\n3\r\n")
    pairs, users, alone = read_user_lines(path, what="interactions")
    assert pairs.select("user", "item").rows() == [(0, 5), (0, 6), (2, 7), (2, 8)]
    assert users.to_list() == [0, 1, 2, 3]
    assert alone == 2


def test_read_user_lines_names_the_bad_token(tmp_path: Path) -> None:
    path = write(tmp_path / "train.txt", "0 1 2\n1 3 abc 4\n")
    with pytest.raises(IngestError) as err:
        read_user_lines(path, what="interactions")
    assert err.value.line == 2
    assert err.value.reason == "item (field 3) 'abc' is not an integer id"


def test_read_delimited_checks_field_counts_per_line(tmp_path: Path) -> None:
    path = write(tmp_path / "x.tsv", "a\tb\n1\t2\n\n3\t4\t5\n")
    with pytest.raises(IngestError) as err:
        read_delimited(path, "\t", what="a table")
    assert err.value.line == 4
    assert "expected 2 tab-separated fields, found 3" in err.value.reason


def test_read_delimited_strips_fields_and_nulls_empty_ones(tmp_path: Path) -> None:
    names, frame = read_delimited(write(tmp_path / "x.csv", "a,b\n x ,\ny,z\n"), ",", what="t")
    assert names == ["a", "b"]
    assert frame.select("a", "b").rows() == [("x", None), ("y", "z")]
    assert frame["line"].to_list() == [2, 3]


@pytest.mark.parametrize(
    ("token", "problem"),
    [("12", None), ("+3", None), ("-4", "negative"), ("1e3", "not an integer"), ("", "not an integer")],
)
def test_describe_id(token: str, problem: str | None) -> None:
    described = describe_id(token, "item")
    assert described is None if problem is None else problem in described


def test_large_file_parses_like_python_across_streaming_chunks(tmp_path: Path) -> None:
    """Many lines, so the streaming engine works in several morsels: `first`/`shift` must still hold."""
    rng = np.random.default_rng(0)
    lines = []
    for user in range(40_000):
        items = rng.integers(0, 5000, rng.integers(0, 12))
        lines.append(" ".join(map(str, [user, *items])) + (" " if user % 7 == 0 else ""))
    path = write(tmp_path / "train.txt", "\r\n".join(lines) + "\r\n")
    pairs, users, alone = read_user_lines(path, what="interactions")
    expected = [(int(t[0]), int(i)) for t in (line.split() for line in lines) for i in t[1:]]
    assert pairs.rows() == expected
    assert users.to_list() == list(range(40_000))
    assert alone == sum(1 for line in lines if len(line.split()) == 1)


def quirky_lines(n: int) -> list[str]:
    """`n` lines of `a b c` ids with blank lines, tabs and trailing spaces sprinkled in."""
    rng = np.random.default_rng(1)
    lines = []
    for i in range(n):
        a, b, c = rng.integers(0, 10_000, 3)
        lines.append("" if i % 17 == 5 else (f"{a}\t{b}\t{c}" if i % 3 else f"{a}  {b} {c} "))
    return lines


@pytest.mark.parametrize("block_bytes", [7, 64, 1000])
def test_small_blocks_parse_like_one_block(tmp_path: Path, block_bytes: int) -> None:
    """Blocks cut anywhere (even inside a line, which then grows the block) give the same rows and line numbers."""
    fields = write(tmp_path / "kg.txt", "\r\n".join(quirky_lines(500)) + "\r\n")
    whole = read_fields(fields, ["h", "r", "t"], what="triples", block_bytes=1 << 20)
    assert read_fields(fields, ["h", "r", "t"], what="triples", block_bytes=block_bytes).equals(whole)
    assert whole["line"].to_list() == [i + 1 for i, line in enumerate(quirky_lines(500)) if line]
    users = write(tmp_path / "train.txt", "\n".join(f"{u} " + " ".join(map(str, range(u % 5))) for u in range(300)) + "\n")
    pairs, order, alone = read_user_lines(users, what="interactions", block_bytes=block_bytes)
    assert pairs.rows() == [(u, i) for u in range(300) for i in range(u % 5)] and order.to_list() == list(range(300)) and alone == 60
    table = write(tmp_path / "t.tsv", "user\titem\n" + "".join(f"u{i}\t{i % 9}\n" for i in range(400)))
    assert read_delimited(table, "\t", what="t", block_bytes=block_bytes)[1].equals(read_delimited(table, "\t", what="t")[1])


@pytest.mark.parametrize("block_bytes", [64, 1000])
def test_a_bad_row_in_a_later_block_names_its_own_line(tmp_path: Path, block_bytes: int) -> None:
    lines = quirky_lines(400)
    lines[333] = "12 7 -4"
    path = write(tmp_path / "kg_final.txt", "\n".join(lines) + "\n")
    with pytest.raises(IngestError, match=r"kg_final.txt:334: t is negative \(-4\)"):
        read_fields(path, ["h", "r", "t"], what="triples", block_bytes=block_bytes)
    users = write(tmp_path / "train.txt", "".join(f"{u} 1 2\n" for u in range(300)) + "300 1 x9\n")
    with pytest.raises(IngestError, match=r"train.txt:301: item \(field 3\) 'x9' is not an integer id"):
        read_user_lines(users, what="interactions", block_bytes=block_bytes)
    table = write(tmp_path / "t.tsv", "user\titem\n" + "".join(f"u{i}\t{i}\n" for i in range(200)) + "u\t1\t2\n")
    with pytest.raises(IngestError, match=r"t.tsv:202: expected 2 tab-separated fields, found 3"):
        read_delimited(table, "\t", what="t", block_bytes=block_bytes)
