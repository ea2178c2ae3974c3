"""Plain tables: `interactions.{csv,tsv,parquet}` and `triples.{csv,tsv,parquet}` with a header.

- interactions: columns `user`, `item`, optional `timestamp` (number, or a Parquet date/time), optional
  `split` (train/valid/test on every row: the splits are kept; without it ingest splits per user).
- triples: columns `head`, `relation`, `tail`.
Values are tokens (strings or integers) and become dense ids in natural order
(`kg_data.formats._tokens`). A triple entity whose token equals an item token *is* that item;
the other entities follow after the items. CSV is read without quoting (use TSV or Parquet for tokens
that hold commas). Errors in Parquet files name the 1-based row instead of a line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from kg_data.errors import IngestError
from kg_data.formats._text import check_text_file, first_null, iter_delimited, read_header
from kg_data.formats._tokens import dense_ids, distinct_tokens, entity_ids, to_ids
from kg_data.progress import FileProgress, NoProgress
from kg_data.schema import SPLITS, RawData
from kg_data.staging import Scratch

EXTENSIONS = (".csv", ".tsv", ".parquet")
COLUMNS = {"interactions": ("user", "item"), "triples": ("head", "relation", "tail")}
OPTIONAL = {"interactions": ("timestamp", "split"), "triples": ()}
_PARQUET_BATCH_ROWS = 500_000


def find_table(raw_dir: Path, stem: str) -> Path:
    """The one `stem.{csv,tsv,parquet}` of the dir; refuses a missing or ambiguous one."""
    matches = [raw_dir / f"{stem}{ext}" for ext in EXTENSIONS if (raw_dir / f"{stem}{ext}").is_file()]
    if not matches:
        raise IngestError(raw_dir / f"{stem}.csv", None, f"missing required file (plain tables need {stem}.csv, .tsv or .parquet)")
    if len(matches) > 1:
        raise IngestError(raw_dir, None, f"several {stem} tables ({', '.join(p.name for p in matches)}); keep one")
    return matches[0]


def iter_table(path: Path, stem: str, progress: FileProgress | None = None) -> Iterator[pl.DataFrame]:
    """A plain table, block by block: its required and optional columns plus `line` (the 1-based row
    for Parquet). Tokens are strings; `timestamp` is Float64 and `split` codes 0/1/2 (train/valid/test) when present."""
    required, optional = COLUMNS[stem], OPTIONAL[stem]
    if path.suffix == ".parquet":
        names, frames, where = *_parquet_batches(path), "row"
    else:
        what = f"a table with header {','.join(required)}"
        separator = "," if path.suffix == ".csv" else "\t"
        names, header_line = read_header(path, separator, what=what)
        frames, where = iter_delimited(path, separator, names, header_line, progress=progress), "line"
    missing = [c for c in required if c not in names]
    if missing:
        raise IngestError(path, 1 if where == "line" else None, f"no column {missing[0]!r} (found {', '.join(names)}); expected {', '.join(required)}")
    keep = [c for c in (*required, *optional) if c in names]
    for frame in frames:
        for column in required:
            at = first_null(frame, column)
            if at is not None:
                _fail(path, where, at, f"{column} is empty")
        frame = frame.select(*keep, "line")
        if "split" in keep:
            frame = frame.with_columns(split=_split_codes(frame, path, where))
        if "timestamp" in keep:
            frame = frame.with_columns(timestamp=_timestamps(frame, path, where))
        yield frame


def _parquet_batches(path: Path) -> tuple[list[str], Iterator[pl.DataFrame]]:
    """The column names of a Parquet table and its rows in batches, as strings (a `timestamp` column
    as Float64 seconds), with `line` = the 1-based row."""
    try:
        schema = pl.scan_parquet(path).collect_schema()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise IngestError(path, None, f"not a readable Parquet file ({str(exc).splitlines()[0][:80]})") from exc
    casts = []
    for name, dtype in schema.items():
        if dtype.is_temporal() and name == "timestamp":
            casts.append(pl.col(name).dt.epoch("ms").cast(pl.Float64) / 1000.0)
        elif name == "timestamp" and dtype.is_numeric():
            casts.append(pl.col(name).cast(pl.Float64))
        else:
            casts.append(pl.col(name).cast(pl.String))

    def batches() -> Iterator[pl.DataFrame]:
        """pyarrow's batch reader: it reads one batch when asked (Polars' `collect_batches` runs
        ahead of a slow consumer and buffers)."""
        line = 1
        try:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH_ROWS):
                frame = pl.from_arrow(batch).select(casts)  # type: ignore[union-attr]
                yield frame.with_columns(line=pl.int_range(line, line + frame.height, dtype=pl.Int64))
                line += frame.height
        except (pl.exceptions.PolarsError, pa.ArrowException, OSError) as exc:
            raise IngestError(path, None, f"not a readable Parquet file ({str(exc).splitlines()[0][:80]})") from exc

    return list(schema.names()), batches()


def _fail(path: Path, where: str, at: int, reason: str) -> None:
    if where == "row":
        raise IngestError(path, None, f"row {at}: {reason}")
    raise IngestError(path, at, reason)


def read_plain(raw_dir: Path, progress: FileProgress | None = None, scratch: Scratch | None = None) -> RawData:
    """Read plain interaction and triple tables (see the module docstring) into a `RawData`, block by
    block into `scratch`."""
    progress = progress or NoProgress()
    scratch = scratch or Scratch()
    paths = {stem: find_table(raw_dir, stem) for stem in COLUMNS}
    for path in paths.values():
        if path.suffix != ".parquet":
            check_text_file(path, "a plain table")
    staged = {}
    for stem, path in paths.items():
        table = scratch.table(f"{stem}-tokens")
        for frame in iter_table(path, stem, progress):
            table.write(frame.drop("line"))
        progress.done(path)
        staged[stem] = table.lazy(dict.fromkeys(COLUMNS[stem], pl.String))
    inter, kg = staged["interactions"], staged["triples"]
    inter_columns = inter.collect_schema().names()

    users = dense_ids(distinct_tokens(inter, "user"))
    items = dense_ids(distinct_tokens(inter, "item"))
    entities = entity_ids(pl.concat([distinct_tokens(kg, "head"), distinct_tokens(kg, "tail")]), items, items.height)
    relations = dense_ids(distinct_tokens(kg, "relation"))
    interactions = to_ids(to_ids(inter.select("user", "item", *(c for c in OPTIONAL["interactions"] if c in inter_columns)), "user", users), "item", items)
    triples = to_ids(to_ids(to_ids(kg.select("head", "relation", "tail"), "head", entities), "tail", entities), "relation", relations)
    return RawData(
        source_format="triples",
        interactions=scratch.keep(
            interactions.select(
                "user",
                "item",
                split=pl.col("split") if "split" in inter_columns else pl.lit(None, pl.Int8),
                timestamp=pl.col("timestamp") if "timestamp" in inter_columns else pl.lit(None, pl.Float64),
            ),
            "interactions",
        ),
        triples=scratch.keep(triples, "triples"),
        sources=list(paths.values()),
        n_users=users.height,
        n_items=items.height,
        n_entities=entities.height,  # every item, then the other entities
        n_relations=relations.height,
        names={
            "users": users.select("id", name="token"),
            "items": items.select("id", name="token"),
            "entities": entities.select("id", name="token"),
            "relations": relations.select("id", name="token"),
        },
    )


def _split_codes(frame: pl.DataFrame, path: Path, where: str) -> pl.Series:
    """The `split` column as codes 0/1/2 (train/valid/test); anything else is refused."""
    bad = frame.filter(~pl.col("split").is_in(SPLITS) | pl.col("split").is_null())
    if bad.height:
        _fail(path, where, int(bad["line"][0]), f"split {bad['split'][0]!r} is not one of {', '.join(SPLITS)}")
    return frame["split"].replace_strict({name: code for code, name in enumerate(SPLITS)}, return_dtype=pl.Int8)


def _timestamps(frame: pl.DataFrame, path: Path, where: str) -> pl.Series:
    raw = frame["timestamp"]
    parsed = raw.cast(pl.Float64, strict=False)
    bad = frame.filter(parsed.is_null() & raw.is_not_null())
    if bad.height:
        _fail(path, where, int(bad["line"][0]), f"timestamp {str(bad['timestamp'][0])[:40]!r} is not a number")
    return parsed.alias("timestamp")
