"""Block-wise parsing of whitespace- and tab-separated text files into Polars frames, with exact error lines.

A file is read in blocks of whole lines (`read_blocks`, about `BLOCK_BYTES` each), so memory stays
bounded however large the file is. A block becomes one string column (Polars' CSV reader with a
separator byte that text never holds: CRLF endings are handled by the reader, blank lines keep their
place and `line` is the real 1-based line number), is parsed with a few vectorized Polars expressions
and checked in bulk; no Python object is made per row. Only when a check fails is the first
offending line described in words.

The `iter_*` functions yield one parsed frame per block, for readers that stream what they parse to
scratch tables; the `read_*` functions concatenate those frames, for small files (list files, maps)
and tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kg_data.errors import IngestError
from kg_data.progress import FileProgress

INT32_MAX = 2**31 - 1
#: Bytes read per block. Parsing a block takes several times its size (token lists, casts), so this
#: bounds the parse's working memory; larger blocks are no faster once Polars' threads are busy.
BLOCK_BYTES = 4 << 20
_LINE_SEPARATOR = "\x1f"  # ASCII unit separator: never in the text files this reads
_SNIFF_BYTES = 1 << 16
_INTEGER = re.compile(r"[+]?\d+")


@dataclass(frozen=True)
class Block:
    """Whole lines of `path`, the first of them line `first_line` (1-based)."""

    path: Path
    first_line: int
    data: bytes

    def lines(self) -> pl.DataFrame:
        """(`line` Int64, `text` String without the line ending), one row per line, blank ones included."""
        frame = pl.read_csv(
            self.data,
            has_header=False,
            separator=_LINE_SEPARATOR,
            quote_char=None,
            schema={"text": pl.String},
            empty_string_is_null=False,
            encoding="utf8-lossy",  # undecodable bytes become U+FFFD and then fail the id checks
        )
        return frame.with_row_index("line", offset=self.first_line).with_columns(pl.col("line").cast(pl.Int64))

    def text_of(self, line: int) -> str:
        """The text of one of the block's lines (to describe an error)."""
        found = self.lines().filter(pl.col("line") == line)
        return found["text"][0] if found.height else ""


def read_blocks(path: Path, *, block_bytes: int | None = None, progress: FileProgress | None = None) -> Iterator[Block]:
    """The file in blocks of whole lines of about `block_bytes` each (default `BLOCK_BYTES`, read at call
    time; a longer line makes a longer block)."""
    block_bytes = block_bytes or BLOCK_BYTES
    line = 1
    rest = b""
    with path.open("rb") as handle:
        while chunk := handle.read(block_bytes):
            if progress is not None:
                progress.advance(path, len(chunk))
            data = rest + chunk if rest else chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            block, rest = (data, b"") if cut == len(data) else (data[:cut], data[cut:])
            yield Block(path, line, block)
            line += block.count(b"\n")
    if rest:
        yield Block(path, line, rest)


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
    """The whole file as a lazy frame of (`line` 1-based Int64, `text` String), for small files."""
    return pl.scan_csv(
        path,
        has_header=False,
        separator=_LINE_SEPARATOR,
        quote_char=None,
        schema={"text": pl.String},
        row_index_name="line",
        row_index_offset=1,
        empty_string_is_null=False,
        encoding="utf8-lossy",
    ).with_columns(pl.col("line").cast(pl.Int64))


def read_line(path: Path, line: int) -> str:
    """The text of one line (used only to describe an error); reads blocks until it is found."""
    for block in read_blocks(path):
        if block.first_line + block.data.count(b"\n") >= line:
            return block.text_of(line)
    return ""


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


# --- fixed fields: `kg_final.txt`, `ratings_final.txt`, maps -----------------------------------------


def iter_fields(
    path: Path,
    names: Sequence[str],
    *,
    ints: Sequence[str] | None = None,
    skip_lines: int = 0,
    what: str,
    hint: str = "",
    progress: FileProgress | None = None,
    block_bytes: int | None = None,
) -> Iterator[pl.DataFrame]:
    """Rows of exactly `len(names)` whitespace-separated fields, one frame per block; blank lines are
    skipped.

    Fields in `ints` (default: all) must be non-negative int32 ids and come back as Int64, the others
    as String. Each frame has the `names` columns and `line`. A bad row raises `IngestError` naming its
    line; `hint` is appended to say how to fix it.

    An all-integer block first goes through Polars' CSV parser (the fast path for clean files such as
    a large `kg_final.txt`); a block it does not parse cleanly (trailing spaces, runs of blanks, bad
    rows) goes through the line-by-line path, which accepts the quirks and names the bad line.
    """
    check_text_file(path, what)
    ints = list(names if ints is None else ints)
    separator = _field_separator(path, skip_lines) if ints == list(names) else None
    rows = 0
    for block in read_blocks(path, block_bytes=block_bytes, progress=progress):
        frame = _strict_int_block(block, names, separator, skip_lines) if separator else None
        if frame is None:
            frame = _careful_block(block, names, ints, skip_lines, hint)
        rows += frame.height
        if frame.height:
            yield frame
    if rows == 0:
        raise IngestError(path, None, f"file holds no data rows; expected {what}")


def read_fields(path: Path, names: Sequence[str], **kwargs: object) -> pl.DataFrame:
    """`iter_fields` of the whole file as one frame (for small files)."""
    return pl.concat(list(iter_fields(path, names, **kwargs)))  # type: ignore[arg-type]


def _field_separator(path: Path, skip_lines: int) -> str:
    with path.open("rb") as handle:
        for _ in range(skip_lines):
            handle.readline()
        return "\t" if b"\t" in handle.readline() else " "


def _strict_int_block(block: Block, names: Sequence[str], separator: str, skip_lines: int) -> pl.DataFrame | None:
    """Parse with the CSV reader (one separator, no quirks); None when the block is not that clean."""
    try:
        frame = pl.read_csv(block.data, has_header=False, separator=separator, quote_char=None, schema=dict.fromkeys(names, pl.Int64))
    except pl.exceptions.PolarsError:
        return None
    frame = (
        frame.with_row_index("line", offset=block.first_line)
        .with_columns(pl.col("line").cast(pl.Int64))
        .filter(pl.col("line") > skip_lines)
        .filter(~pl.all_horizontal(pl.col(n).is_null() for n in names))  # blank lines
    )
    valid = frame.select(pl.all_horizontal(valid_id(pl.col(n)) for n in names).all()).item()
    return frame.select(*names, "line") if valid else None


def _careful_block(block: Block, names: Sequence[str], ints: Sequence[str], skip_lines: int, hint: str) -> pl.DataFrame:
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
        block.lines()
        .lazy()
        .filter(pl.col("line") > skip_lines)
        .with_columns(_f=fields)
        .filter(pl.col("_f").struct.field(names[0]) != "")
        .select(*columns, "line", _extra=pl.col("_f").struct.field("_extra"))
        .with_columns(_ok=pl.all_horizontal(checks) & pl.col("_extra").is_null())
        .collect()
    )
    line = _first_line(frame, "_ok")
    if line is not None:
        raise IngestError(block.path, line, _describe_fields(block.text_of(line), names, ints) + hint)
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


# --- per-user lines: KGAT `train.txt` ------------------------------------------------------------------


@dataclass(frozen=True)
class UserLines:
    """One block of `user item item ...` lines: its (`user`, `item`) pairs, the user of every line
    (in order), and how many lines hold a user alone."""

    pairs: pl.DataFrame
    users: pl.Series
    alone: int


def iter_user_lines(
    path: Path, *, what: str, hint: str = "", progress: FileProgress | None = None, block_bytes: int | None = None
) -> Iterator[UserLines]:
    """KGAT-style lines `user item item ...`, one `UserLines` per block.

    Each line is split into tokens and exploded in Polars; the first token of a line is its user (a
    block holds whole lines, so that holds within it). A line may hold one token only (a user with no
    items in this file): counted, not an error. Spaces and tabs separate tokens in any number
    (splitting on one literal space and dropping the empty tokens is three times faster than a regex).
    """
    check_text_file(path, what)
    rows = 0
    for block in read_blocks(path, block_bytes=block_bytes, progress=progress):
        tokens = (
            block.lines()
            .lazy()
            .select("line", token=pl.col("text").str.replace_all("\t", " ", literal=True).str.split(" "))
            .explode("token")
            .filter(pl.col("token") != "")  # runs of blanks, trailing spaces, blank lines
            .with_columns(
                id=pl.col("token").cast(pl.Int64, strict=False),
                first=(pl.col("line") != pl.col("line").shift(1)).fill_null(True),
                last=(pl.col("line") != pl.col("line").shift(-1)).fill_null(True),
            )
            .select(
                "line",
                "first",
                "id",
                user=pl.when("first").then("id").forward_fill(),
                alone=pl.col("first") & pl.col("last"),
                ok=valid_id(pl.col("id")),
            )
            .collect()
        )
        line = _first_line(tokens, "ok")
        if line is not None:
            raise IngestError(path, line, _describe_tokens(block.text_of(line)) + hint)
        rows += tokens.height
        if tokens.height:
            yield UserLines(
                pairs=tokens.filter(~tokens["first"]).select("user", item="id"),
                users=tokens.filter(tokens["first"])["id"].alias("user"),
                alone=int(tokens["alone"].sum()),
            )
    if rows == 0:
        raise IngestError(path, None, f"file holds no data rows; expected {what}")


def read_user_lines(path: Path, *, what: str, hint: str = "", block_bytes: int | None = None) -> tuple[pl.DataFrame, pl.Series, int]:
    """`iter_user_lines` of the whole file: ((user, item) rows, each line's user, lines with a user alone)."""
    parts = list(iter_user_lines(path, what=what, hint=hint, block_bytes=block_bytes))
    return pl.concat([p.pairs for p in parts]), pl.concat([p.users for p in parts]), sum(p.alone for p in parts)


def _describe_tokens(text: str) -> str:
    for position, token in enumerate(text.split()):
        problem = describe_id(token, "user" if position == 0 else f"item (field {position + 1})")
        if problem:
            return problem
    return f"unreadable line {text[:60]!r}"


# --- tables with a header: RecBole atomic files, plain CSV/TSV ----------------------------------------


def read_header(path: Path, separator: str, *, what: str) -> tuple[list[str], int]:
    """The column names on the first non-blank line (stripped) and that line's number."""
    check_text_file(path, what)
    for block in read_blocks(path):
        lines = block.lines().filter(pl.col("text").str.strip_chars() != "")
        if lines.height:
            return [f.strip() for f in lines["text"][0].split(separator)], int(lines["line"][0])
    raise IngestError(path, None, f"file holds no data rows; expected {what}")


def iter_delimited(
    path: Path,
    separator: str,
    names: Sequence[str],
    header_line: int,
    *,
    progress: FileProgress | None = None,
    block_bytes: int | None = None,
) -> Iterator[pl.DataFrame]:
    """The rows after the header (`read_header`), split on `separator`, one frame per block: the
    `names` columns as stripped strings (empty ones null) plus `line`. Every non-blank row must have
    as many fields as the header. No quoting: RecBole files are plain tab-separated text, and so are
    the plain tables this accepts."""
    n = len(names)
    fields = pl.col("text").str.splitn(separator, n + 1).struct.rename_fields([*[f"_{i}" for i in range(n)], "_extra"])
    for block in read_blocks(path, block_bytes=block_bytes, progress=progress):
        frame = (
            block.lines()
            .lazy()
            .filter((pl.col("line") > header_line) & (pl.col("text").str.strip_chars() != ""))
            .with_columns(_f=fields)
            .select(
                "line",
                *[_blank_to_null(pl.col("_f").struct.field(f"_{i}").str.strip_chars()).alias(name) for i, name in enumerate(names)],
                _n_fields=pl.col("text").str.count_matches(separator, literal=True) + 1,
            )
            .collect()
        )
        bad = frame.filter(pl.col("_n_fields") != n)
        if bad.height:
            sep_name = "tab" if separator == "\t" else repr(separator)
            raise IngestError(path, int(bad["line"][0]), f"expected {n} {sep_name}-separated fields, found {int(bad['_n_fields'][0])}")
        if frame.height:
            yield frame.drop("_n_fields")


def read_delimited(path: Path, separator: str, *, what: str, block_bytes: int | None = None) -> tuple[list[str], pl.DataFrame]:
    """A table with a header line -> (column names, all its rows as in `iter_delimited`)."""
    names, header_line = read_header(path, separator, what=what)
    frames = list(iter_delimited(path, separator, names, header_line, block_bytes=block_bytes))
    if not frames:
        return names, pl.DataFrame(schema={"line": pl.Int64, **dict.fromkeys(names, pl.String)})
    return names, pl.concat(frames)


def _blank_to_null(expr: pl.Expr) -> pl.Expr:
    return pl.when(expr != "").then(expr)


def first_null(frame: pl.DataFrame, column: str) -> int | None:
    """The line of the first row whose `column` is null (a missing field), or None."""
    nulls = frame.filter(pl.col(column).is_null())
    return int(nulls["line"].min()) if nulls.height else None
