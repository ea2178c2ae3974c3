"""KGAT format (Wang et al. 2019): per-user interaction lines, `kg_final.txt`, optional list files.

- `train.txt`, `test.txt`, optional `valid.txt`: `user item item ...` per line. A line may hold the
  user alone (no items in that split): counted in `reported.user_lines_without_items`.
- `kg_final.txt`: `head relation tail` per line; items are entities `0..n_items-1`.
- Optional `user_list.txt`, `item_list.txt`, `entity_list.txt`, `relation_list.txt`: a header line
  (`org_id remap_id [freebase_id]`), then one row per id. They give names and size the id spaces;
  published data has ids beyond them, so each id space is the larger of the list and the ids seen
  (`reported.<kind>_ids_beyond_<kind>_list` counts the distinct ids past the list).
Fields are separated by any run of spaces or tabs; CRLF endings and trailing spaces are fine.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kg_data.errors import IngestError
from kg_data.formats._text import (
    check_text_file,
    iter_fields,
    iter_user_lines,
    normalized_text,
    read_line,
    scan_lines,
    valid_id,
)
from kg_data.progress import FileProgress, NoProgress
from kg_data.schema import SPLITS, RawData
from kg_data.staging import Scratch

REQUIRED = ("train.txt", "test.txt", "kg_final.txt")
SPLIT_FILES = {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}
LIST_FILES = {"users": "user_list.txt", "items": "item_list.txt", "entities": "entity_list.txt", "relations": "relation_list.txt"}
_HINT = "; KGAT files hold non-negative integer ids separated by spaces"


def read_kgat(raw_dir: Path, progress: FileProgress | None = None, scratch: Scratch | None = None) -> RawData:
    """Read a KGAT dir (see the module docstring) into a `RawData`, block by block into `scratch`."""
    progress = progress or NoProgress()
    scratch = scratch or Scratch()
    for name in REQUIRED:
        if not (raw_dir / name).is_file():
            raise IngestError(raw_dir / name, None, "missing required file (a KGAT dir needs train.txt, test.txt and kg_final.txt)")

    interactions = scratch.table("interactions")
    alone, top_user, lone_users = 0, -1, []
    for split, name in SPLIT_FILES.items():
        path = raw_dir / name
        if split == "valid" and not path.exists():
            continue
        for block in iter_user_lines(path, what="KGAT interactions, 'user item item ...' per line", hint=_HINT, progress=progress):
            interactions.write(
                block.pairs.select(
                    pl.col("user", "item").cast(pl.Int32), split=pl.lit(SPLITS.index(split), pl.Int8), timestamp=pl.lit(None, pl.Float64)
                )
            )
            top_user = max(top_user, int(block.users.max()))
            alone += block.alone
            if block.alone:  # users of lines without items: not among the pairs' users
                lone_users.append(block.users.filter(~block.users.is_in(block.pairs["user"].implode())))
        progress.done(path)

    kg_path = raw_dir / "kg_final.txt"
    triples = scratch.table("triples")
    for block in iter_fields(kg_path, ["head", "relation", "tail"], what="KGAT triples, 'head relation tail' per line", hint=_HINT, progress=progress):
        triples.write(block.select(pl.col("head", "relation", "tail").cast(pl.Int32)))
    progress.done(kg_path)

    data = RawData(
        source_format="kgat",
        interactions=interactions.lazy(),
        triples=triples.lazy(),
        sources=[raw_dir / n for n in (*SPLIT_FILES.values(), "kg_final.txt", *LIST_FILES.values()) if (raw_dir / n).is_file()],
        reported={"user_lines_without_items": alone},
    )
    short_rows = 0
    for kind, name in LIST_FILES.items():
        path = raw_dir / name
        if not path.is_file():
            continue
        names, n_short = read_list_file(path)
        progress.done(path)
        short_rows += n_short
        size = int(names["id"].max()) + 1
        data.names[kind] = names
        setattr(data, f"n_{kind}", size)
        singular = kind.removesuffix("s").replace("entitie", "entity")
        data.reported[f"{singular}_ids_beyond_{singular}_list"] = _distinct_at_or_above(data, kind, size, lone_users)
    data.n_users = max(data.n_users, top_user + 1)
    data.reported["list_rows_with_missing_fields"] = short_rows
    return data


def _distinct_at_or_above(data: RawData, kind: str, size: int, lone_users: list[pl.Series]) -> int:
    """Distinct ids of `kind` >= `size` in the data (a streaming count over the scratch tables)."""
    if kind == "users":
        ids = pl.concat([data.interactions.select(id="user"), *(s.to_frame("id").lazy() for s in lone_users)], how="vertical_relaxed")
    elif kind == "items":
        ids = data.interactions.select(id="item")
    elif kind == "entities":
        ids = pl.concat([data.triples.select(id="head"), data.triples.select(id="tail")])
    else:
        ids = data.triples.select(id="relation")
    return int(ids.filter(pl.col("id") >= size).select(pl.col("id").n_unique()).collect(engine="streaming").item())


def read_list_file(path: Path) -> tuple[pl.DataFrame, int]:
    """A KGAT `*_list.txt` -> ((`id`, `name`) frame, rows with fewer fields than the header).

    Line 1 is the header (`org_id remap_id [freebase_id]`); `name` is the org_id. A row may lack the
    trailing fields (counted) but needs its remap_id; a remap_id given twice is an error.
    """
    what = "a KGAT list file, 'org_id remap_id [...]' per line after a header line"
    check_text_file(path, what)
    header = read_line(path, 1).split()
    if len(header) < 2 or header[1] != "remap_id":
        raise IngestError(path, 1, f"expected a header line like 'org_id remap_id', found {' '.join(header)[:60]!r}")
    width = len(header)
    fast = _strict_list(path, width)
    if fast is not None:
        return fast
    fields = normalized_text().str.splitn(" ", width + 1).struct.rename_fields([f"_{i}" for i in range(width + 1)])
    rows = (
        scan_lines(path)
        .filter(pl.col("line") > 1)
        .with_columns(_f=fields)
        .filter(pl.col("_f").struct.field("_0") != "")
        .select(
            "line",
            name=pl.col("_f").struct.field("_0"),
            id=pl.col("_f").struct.field("_1").cast(pl.Int64, strict=False),
            _short=pl.col("_f").struct.field(f"_{width - 1}").is_null(),
            _extra=pl.col("_f").struct.field(f"_{width}").is_not_null(),
        )
        .collect(engine="streaming")
    )
    if rows.height == 0:
        raise IngestError(path, None, f"file holds no data rows after its header; expected {what}")
    bad = rows.filter(~valid_id(pl.col("id")) | pl.col("_extra"))
    if bad.height:
        line = int(bad["line"][0])
        text = read_line(path, line)
        reason = (
            f"expected at most {width} fields ({' '.join(header)}), found {len(text.split())}"
            if bad["_extra"][0]
            else f"remap_id missing or not a non-negative integer in {text.strip()[:60]!r}"
        )
        raise IngestError(path, line, reason)
    repeated = rows.filter(pl.col("id").is_duplicated()).sort("line")
    if repeated.height:
        first_line, again = int(repeated["line"][0]), repeated.filter(pl.col("id") == repeated["id"][0])
        raise IngestError(path, int(again["line"][1]), f"remap_id {repeated['id'][0]} already given on line {first_line}")
    return rows.select("id", "name"), int(rows["_short"].sum())


def _strict_list(path: Path, width: int) -> tuple[pl.DataFrame, int] | None:
    """The CSV reader's fast path for a clean list file (single spaces, no quirks); None otherwise."""
    schema = {"name": pl.String, "id": pl.Int64, **{f"_{i}": pl.String for i in range(2, width)}}
    try:
        rows = pl.scan_csv(path, has_header=False, skip_lines=1, separator=" ", quote_char=None, schema=schema).collect()
    except pl.exceptions.PolarsError:
        return None
    if rows.height == 0 or not rows.select(valid_id(pl.col("id")).all() & pl.col("id").is_unique().all()).item():
        return None
    short = rows.select(pl.col(f"_{width - 1}").is_null().sum()).item() if width > 2 else 0
    return rows.select("id", "name"), int(short)
