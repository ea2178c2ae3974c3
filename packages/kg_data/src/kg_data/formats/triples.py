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

from pathlib import Path

import polars as pl

from kg_data.errors import IngestError
from kg_data.formats._text import check_text_file, first_null, read_delimited
from kg_data.formats._tokens import dense_ids, entity_ids, to_ids
from kg_data.progress import FileProgress, NoProgress
from kg_data.schema import SPLITS, RawData

EXTENSIONS = (".csv", ".tsv", ".parquet")
COLUMNS = {"interactions": ("user", "item"), "triples": ("head", "relation", "tail")}
OPTIONAL = {"interactions": ("timestamp", "split"), "triples": ()}


def find_table(raw_dir: Path, stem: str) -> Path:
    """The one `stem.{csv,tsv,parquet}` of the dir; refuses a missing or ambiguous one."""
    matches = [raw_dir / f"{stem}{ext}" for ext in EXTENSIONS if (raw_dir / f"{stem}{ext}").is_file()]
    if not matches:
        raise IngestError(raw_dir / f"{stem}.csv", None, f"missing required file (plain tables need {stem}.csv, .tsv or .parquet)")
    if len(matches) > 1:
        raise IngestError(raw_dir, None, f"several {stem} tables ({', '.join(p.name for p in matches)}); keep one")
    return matches[0]


def read_table(path: Path, stem: str) -> pl.DataFrame:
    """A plain table -> its required and optional columns (tokens as strings) plus `line`."""
    required, optional = COLUMNS[stem], OPTIONAL[stem]
    if path.suffix == ".parquet":
        frame, where = _read_parquet(path), "row"
    else:
        what = f"a table with header {','.join(required)}"
        _, frame = read_delimited(path, "," if path.suffix == ".csv" else "\t", what=what)
        where = "line"
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise IngestError(path, 1 if where == "line" else None, f"no column {missing[0]!r} (found {', '.join(c for c in frame.columns if c != 'line')}); expected {', '.join(required)}")
    for column in required:
        at = first_null(frame, column)
        if at is not None:
            _fail(path, where, at, f"{column} is empty")
    keep = [c for c in (*required, *optional) if c in frame.columns]
    return frame.select(*keep, "line")


def _read_parquet(path: Path) -> pl.DataFrame:
    try:
        frame = pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise IngestError(path, None, f"not a readable Parquet file ({str(exc).splitlines()[0][:80]})") from exc
    casts = []
    for name, dtype in frame.schema.items():
        if dtype.is_temporal() and name == "timestamp":
            casts.append(pl.col(name).dt.epoch("ms").cast(pl.Float64) / 1000.0)
        elif name == "timestamp" and dtype.is_numeric():
            casts.append(pl.col(name).cast(pl.Float64))
        else:
            casts.append(pl.col(name).cast(pl.String))
    return frame.select(casts).with_row_index("line", offset=1).with_columns(pl.col("line").cast(pl.Int64))


def _fail(path: Path, where: str, at: int, reason: str) -> None:
    if where == "row":
        raise IngestError(path, None, f"row {at}: {reason}")
    raise IngestError(path, at, reason)


def read_plain(raw_dir: Path, progress: FileProgress | None = None) -> RawData:
    """Read plain interaction and triple tables (see the module docstring) into a `RawData`."""
    progress = progress or NoProgress()
    paths = {stem: find_table(raw_dir, stem) for stem in COLUMNS}
    for path in paths.values():
        if path.suffix != ".parquet":
            check_text_file(path, "a plain table")
    inter = read_table(paths["interactions"], "interactions")
    progress.done(paths["interactions"])
    kg = read_table(paths["triples"], "triples")
    progress.done(paths["triples"])

    where = "row" if paths["interactions"].suffix == ".parquet" else "line"
    split = _splits(inter, paths["interactions"], where)
    timestamp = _timestamps(inter, paths["interactions"], where)

    users = dense_ids(inter["user"])
    items = dense_ids(inter["item"])
    entities = entity_ids(pl.concat([kg["head"], kg["tail"]]), items, items.height)
    relations = dense_ids(kg["relation"])
    interactions = to_ids(to_ids(inter.select("user", "item"), "user", users), "item", items)
    triples = to_ids(to_ids(to_ids(kg.select("head", "relation", "tail"), "head", entities), "tail", entities), "relation", relations)
    return RawData(
        source_format="triples",
        interactions=interactions.with_columns(split=split, timestamp=timestamp),
        triples=triples,
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


def _splits(inter: pl.DataFrame, path: Path, where: str) -> pl.Series:
    if "split" not in inter.columns:
        return pl.Series("split", [None] * inter.height, dtype=pl.String)
    bad = inter.filter(~pl.col("split").is_in(SPLITS) | pl.col("split").is_null())
    if bad.height:
        _fail(path, where, int(bad["line"][0]), f"split {bad['split'][0]!r} is not one of {', '.join(SPLITS)}")
    return inter["split"]


def _timestamps(inter: pl.DataFrame, path: Path, where: str) -> pl.Series:
    if "timestamp" not in inter.columns:
        return pl.Series("timestamp", [None] * inter.height, dtype=pl.Float64)
    raw = inter["timestamp"]
    parsed = raw.cast(pl.Float64, strict=False)
    bad = inter.filter(parsed.is_null() & raw.is_not_null())
    if bad.height:
        _fail(path, where, int(bad["line"][0]), f"timestamp {str(bad['timestamp'][0])[:40]!r} is not a number")
    return parsed.alias("timestamp")
