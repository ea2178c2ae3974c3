"""Bulk parsing of whitespace- and tab-separated text files into Polars frames, with exact error lines.

Every reader goes through `scan_lines`: the file becomes one string column (Polars' CSV reader with a
separator byte that text never holds), so CRLF endings are handled by the reader, blank lines keep
their place and `line` is the real 1-based line number. Parsing is then a few vectorized Polars
expressions run on the streaming engine; no Python object is made per row. Checks are done in bulk
too; only when a check fails is the first offending line read back and described in words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from kg_data.errors import IngestError

INT32_MAX = 2**31 - 1
_LINE_SEPARATOR = "\x1f"  # ASCII unit separator: never in the text files this reads
_SNIFF_BYTES = 1 << 16
_INTEGER = re.compile(r"[+]?\d+")


def check_text_file(path: Path, what: str) -> None:
    """Refuse a missing, empty or binary file before parsing it; `what` says what the file should hold."""
    if not path.is_file():
        raise IngestError(path, None, f"missing required file ({what})")
    if path.stat().st_size == 0:
        raise IngestError(path, None, f"file is empty; expected {what}")
    with path.open("rb") as handle:
        head = handle.read(_SNIFF_BYTES)
    nul = head.find(b"\x00")
    if nul >= 0:
        line = head.count(b"\n", 0, nul) + 1
        raise IngestError(path, line, f"binary data (NUL byte), not a text file; expected {what}")


def scan_lines(path: Path) -> pl.LazyFrame:
    """The file as a lazy frame of (`line` 1-based Int64, `text` String without the line ending)."""
    return pl.scan_csv(
        path,
        has_header=False,
        separator=_LINE_SEPARATOR,
        quote_char=None,
        schema={"text": pl.String},
        row_index_name="line",
        row_index_offset=1,
        empty_string_is_null=False,
        encoding="utf8-lossy",  # undecodable bytes become U+FFFD and then fail the id checks
    ).with_columns(pl.col("line").cast(pl.Int64))


def read_line(path: Path, line: int) -> str:
    """The text of one line (used only to describe an error)."""
    found = scan_lines(path).filter(pl.col("line") == line).collect()
    return found["text"][0] if found.height else ""


def normalized_text() -> pl.Expr:
    """Runs of spaces and tabs become one space; leading and trailing whitespace goes (str.split() rules)."""
    return pl.col("text").str.replace_all(r"\s+", " ").str.strip_chars()


def valid_id(expr: pl.Expr) -> pl.Expr:
    """True where an Int64 column holds an id that fits int32 and is not negative."""
    return expr.is_not_null() & (expr >= 0) & (expr <= INT32_MAX)


def describe_id(token: str, name: str) -> str | None:
    """Why `token` is not a usable id for field `name`, or None when it is one."""
    if token.startswith("-") and _INTEGER.fullmatch(token[1:]):
        return f"{name} is negative ({token}); ids must be >= 0"
    if not _INTEGER.fullmatch(token):
        shown = token if len(token) <= 40 else token[:37] + "..."
        return f"{name} {shown!r} is not an integer id"
    if int(token) > INT32_MAX:
        return f"{name} {token} is too large (ids must fit in int32, <= {INT32_MAX})"
    return None


def _first_line(frame: pl.DataFrame, ok: str) -> int | None:
    bad = frame.filter(~pl.col(ok))
    return int(bad["line"].min()) if bad.height else None


def read_fields(
    path: Path,
    names: Sequence[str],
    *,
    ints: Sequence[str] | None = None,
    skip_lines: int = 0,
    what: str,
    hint: str = "",
) -> pl.DataFrame:
    """Rows of exactly `len(names)` whitespace-separated fields; blank lines are skipped.

    Fields in `ints` (default: all) must be non-negative int32 ids and come back as Int64, the others
    as String. The result has the `names` columns and `line`. A bad row raises `IngestError` naming its
    line; `hint` is appended to say how to fix it.

    All-integer files first go through Polars' CSV parser (the fast path for clean files such as a
    large `kg_final.txt`); anything it does not parse cleanly (trailing spaces, runs of blanks, bad
    rows) goes through the line-by-line path, which accepts the quirks and names the bad line.
    """
    check_text_file(path, what)
    ints = list(names if ints is None else ints)
    if ints == list(names):
        frame = _strict_int_table(path, names, skip_lines)
        if frame is not None:
            return frame
    return _careful_fields(path, names, ints, skip_lines, what, hint)


def _strict_int_table(path: Path, names: Sequence[str], skip_lines: int) -> pl.DataFrame | None:
    """Parse with the CSV reader (one separator, no quirks); None when the file is not that clean."""
    with path.open("rb") as handle:
        for _ in range(skip_lines):
            handle.readline()
        separator = "\t" if b"\t" in handle.readline() else " "
    try:
        frame = (
            pl.scan_csv(
                path,
                has_header=False,
                separator=separator,
                quote_char=None,
                skip_lines=skip_lines,
                schema=dict.fromkeys(names, pl.Int64),
                row_index_name="line",
                row_index_offset=skip_lines + 1,
            )
            .with_columns(pl.col("line").cast(pl.Int64))
            .filter(~pl.all_horizontal(pl.col(n).is_null() for n in names))  # blank lines
            .collect(engine="streaming")
        )
    except pl.exceptions.PolarsError:
        return None
    valid = frame.select(pl.all_horizontal(valid_id(pl.col(n)) for n in names).all()).item()
    return frame.select(*names, "line") if frame.height and valid else None


def _careful_fields(
    path: Path, names: Sequence[str], ints: Sequence[str], skip_lines: int, what: str, hint: str
) -> pl.DataFrame:
    """The line-by-line path: whitespace runs normalized, each line split into its fields, checked."""
    n = len(names)
    fields = normalized_text().str.splitn(" ", n + 1).struct.rename_fields([*names, "_extra"])
    columns = [
        pl.col("_f").struct.field(name).cast(pl.Int64, strict=False).alias(name)
        if name in ints
        else pl.col("_f").struct.field(name).alias(name)
        for name in names
    ]
    checks = [valid_id(pl.col(name)) for name in ints] + [pl.col(name).is_not_null() for name in names]
    frame = (
        scan_lines(path)
        .filter(pl.col("line") > skip_lines)
        .with_columns(_f=fields)
        .filter(pl.col("_f").struct.field(names[0]) != "")
        .select(*columns, "line", _extra=pl.col("_f").struct.field("_extra"))
        .with_columns(_ok=pl.all_horizontal(checks) & pl.col("_extra").is_null())
        .collect(engine="streaming")
    )
    if frame.height == 0:
        raise IngestError(path, None, f"file holds no data rows; expected {what}")
    line = _first_line(frame, "_ok")
    if line is not None:
        raise IngestError(path, line, _describe_fields(read_line(path, line), names, ints) + hint)
    return frame.drop("_extra", "_ok")


def _describe_fields(text: str, names: Sequence[str], ints: Sequence[str]) -> str:
    tokens = text.split()
    if len(tokens) != len(names):
        return f"expected {len(names)} fields ({' '.join(names)}), found {len(tokens)}"
    for name, token in zip(names, tokens, strict=True):
        problem = describe_id(token, name) if name in ints else None
        if problem:
            return problem
    return f"unreadable row {text[:60]!r}"


def read_user_lines(path: Path, *, what: str, hint: str = "") -> tuple[pl.DataFrame, pl.Series, int]:
    """KGAT-style lines `user item item ...` -> ((user, item) rows, each line's user, lines with a
    user alone).

    Each line is split into tokens and exploded in Polars; the first token of a line is its user. A
    line may hold one token only (a user with no items in this file): counted, not an error. Spaces
    and tabs separate tokens in any number (splitting on one literal space and dropping the empty
    tokens is three times faster than a regex).
    """
    check_text_file(path, what)
    tokens = (
        scan_lines(path)
        .select("line", token=pl.col("text").str.replace_all("\t", " ", literal=True).str.split(" "))
        .explode("token")
        .filter(pl.col("token") != "")  # runs of blanks, trailing spaces, blank lines
        .with_columns(
            id=pl.col("token").cast(pl.Int64, strict=False),
            first=(pl.col("line") != pl.col("line").shift(1)).fill_null(True),
            last=(pl.col("line") != pl.col("line").shift(-1)).fill_null(True),
        )
        .select(
            "first",
            "id",
            user=pl.when("first").then("id").forward_fill(),
            alone=pl.col("first") & pl.col("last"),
            ok=valid_id(pl.col("id")),
        )
        .collect(engine="streaming")
    )
    if tokens.height == 0:
        raise IngestError(path, None, f"file holds no data rows; expected {what}")
    if not tokens["ok"].all():
        line = _first_bad_token_line(path)
        raise IngestError(path, line, _describe_tokens(read_line(path, line)) + hint)
    pairs = tokens.filter(~tokens["first"]).select("user", item="id")
    return pairs, tokens.filter(tokens["first"])["id"].alias("user"), int(tokens["alone"].sum())


def _first_bad_token_line(path: Path) -> int:
    """The line of the first token that is not a valid id (second pass, on the error path only)."""
    bad = (
        scan_lines(path)
        .select("line", token=pl.col("text").str.replace_all("\t", " ", literal=True).str.split(" "))
        .explode("token")
        .filter((pl.col("token") != "") & ~valid_id(pl.col("token").cast(pl.Int64, strict=False)))
        .select(pl.col("line").min())
        .collect()
    )
    return int(bad.item())


def _describe_tokens(text: str) -> str:
    for position, token in enumerate(text.split()):
        problem = describe_id(token, "user" if position == 0 else f"item (field {position + 1})")
        if problem:
            return problem
    return f"unreadable line {text[:60]!r}"


def read_delimited(path: Path, separator: str, *, what: str) -> tuple[list[str], pl.DataFrame]:
    """A table of string fields split on `separator` -> (column names, frame of them + `line`).

    The first non-blank line names the columns; fields are stripped, empty ones are null. Every
    non-blank row must have as many fields as the header. No quoting: RecBole files are plain
    tab-separated text, and so are the plain tables this accepts.
    """
    check_text_file(path, what)
    first = scan_lines(path).filter(pl.col("text").str.strip_chars() != "").head(1).collect()
    if first.height == 0:
        raise IngestError(path, None, f"file holds no data rows; expected {what}")
    first_text = first["text"][0]
    names = [f.strip() for f in first_text.split(separator)]
    skip = int(first["line"][0])
    n = len(names)
    fields = pl.col("text").str.splitn(separator, n + 1).struct.rename_fields([*[f"_{i}" for i in range(n)], "_extra"])
    frame = (
        scan_lines(path)
        .filter((pl.col("line") > skip) & (pl.col("text").str.strip_chars() != ""))
        .with_columns(_f=fields)
        .select(
            "line",
            *[
                _blank_to_null(pl.col("_f").struct.field(f"_{i}").str.strip_chars()).alias(name)
                for i, name in enumerate(names)
            ],
            _n_fields=pl.col("text").str.count_matches(separator, literal=True) + 1,
        )
        .collect(engine="streaming")
    )
    bad = frame.filter(pl.col("_n_fields") != n)
    if bad.height:
        found = int(bad["_n_fields"][0])
        sep_name = "tab" if separator == "\t" else repr(separator)
        raise IngestError(path, int(bad["line"][0]), f"expected {n} {sep_name}-separated fields, found {found}")
    return names, frame.drop("_n_fields")


def _blank_to_null(expr: pl.Expr) -> pl.Expr:
    return pl.when(expr != "").then(expr)


def first_null(frame: pl.DataFrame, column: str) -> int | None:
    """The line of the first row whose `column` is null (a missing field), or None."""
    nulls = frame.filter(pl.col(column).is_null())
    return int(nulls["line"].min()) if nulls.height else None
