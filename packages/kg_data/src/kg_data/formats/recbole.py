"""RecBole atomic files: `NAME.inter`, `NAME.kg`, `NAME.link`, tab-separated with typed headers.

- `.inter`: `user_id:token item_id:token [rating:float] [timestamp:float] ...`. Every row is kept as an
  implicit positive (ratings are not thresholded); `timestamp` orders the per-user split.
- `.kg`: `head_id:token relation_id:token tail_id:token` over entity tokens.
- `.link`: `item_id:token entity_id:token` ties items to KG entities.
Tokens become dense ids in natural order (`kg_data.formats._tokens`). Items are the items of `.inter`
and `.link`; a linked item's entity takes the item's id, and the KG entities that are not items
follow after the items. Unlinked items stay items with no triples (reported).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from kg_data.errors import IngestError
from kg_data.formats._text import first_null, iter_delimited, read_header
from kg_data.formats._tokens import dense_ids, distinct_tokens, entity_ids, to_ids
from kg_data.progress import FileProgress, NoProgress
from kg_data.schema import RawData
from kg_data.staging import Scratch

SUFFIXES = (".inter", ".kg", ".link")
REQUIRED_COLUMNS = {
    ".inter": ("user_id:token", "item_id:token"),
    ".kg": ("head_id:token", "relation_id:token", "tail_id:token"),
    ".link": ("item_id:token", "entity_id:token"),
}
_TYPED_FIELD = re.compile(r"[^:\s]+:(token|token_seq|float|float_seq)")


def find_atomic_files(raw_dir: Path) -> dict[str, Path]:
    """suffix -> the one `NAME.suffix` file of the dir; refuses a missing or ambiguous one."""
    found = {}
    for suffix in SUFFIXES:
        matches = sorted(p for p in raw_dir.glob(f"*{suffix}") if p.is_file())
        if not matches:
            raise IngestError(raw_dir / f"NAME{suffix}", None, "missing required file (a RecBole dir needs NAME.inter, NAME.kg and NAME.link)")
        if len(matches) > 1:
            raise IngestError(raw_dir, None, f"several {suffix} files ({', '.join(p.name for p in matches)}); keep one dataset per dir")
        found[suffix] = matches[0]
    return found


def iter_atomic(path: Path, suffix: str, progress: FileProgress | None = None) -> Iterator[pl.DataFrame]:
    """One atomic file, block by block: its columns (named without the `:type`) as strings, plus `line`.
    The header is checked before any row is read; a required field left empty is refused."""
    what = f"a RecBole {suffix} file with a typed header like {chr(9).join(REQUIRED_COLUMNS[suffix])!r}"
    names, header_line = read_header(path, "\t", what=what)
    untyped = [n for n in names if not _TYPED_FIELD.fullmatch(n)]
    if untyped:
        raise IngestError(path, 1, f"no RecBole typed header: column {untyped[0][:40]!r} lacks a ':token'/':float' type; line 1 must read like {chr(9).join(REQUIRED_COLUMNS[suffix])!r}")
    missing = [c for c in REQUIRED_COLUMNS[suffix] if c not in names]
    if missing:
        raise IngestError(path, 1, f"header lacks column {missing[0]!r} (found {', '.join(names)})")
    for frame in iter_delimited(path, "\t", names, header_line, progress=progress):
        for column in REQUIRED_COLUMNS[suffix]:
            line = first_null(frame, column)
            if line is not None:
                raise IngestError(path, line, f"{column.split(':')[0]} is empty")
        yield frame.rename({n: n.split(":")[0] for n in names})


def read_recbole(raw_dir: Path, progress: FileProgress | None = None, scratch: Scratch | None = None) -> RawData:
    """Read a RecBole atomic dir (see the module docstring) into a `RawData`, block by block into `scratch`."""
    progress = progress or NoProgress()
    scratch = scratch or Scratch()
    files = find_atomic_files(raw_dir)
    inter, kg = scratch.table("inter-tokens"), scratch.table("kg-tokens")
    for frame in iter_atomic(files[".inter"], ".inter", progress):
        inter.write(frame.select("user_id", "item_id", timestamp=_timestamps(frame, files[".inter"])))
    progress.done(files[".inter"])
    for frame in iter_atomic(files[".kg"], ".kg", progress):
        kg.write(frame.select("head_id", "relation_id", "tail_id"))
    progress.done(files[".kg"])
    link_frames = list(iter_atomic(files[".link"], ".link", progress))  # one row per item: an id map
    progress.done(files[".link"])
    link = _checked_links(pl.concat(link_frames) if link_frames else pl.DataFrame(schema={"line": pl.Int64, "item_id": pl.String, "entity_id": pl.String}), files[".link"])
    inter_tokens = inter.lazy({"user_id": pl.String, "item_id": pl.String, "timestamp": pl.Float64})
    kg_tokens = kg.lazy({"head_id": pl.String, "relation_id": pl.String, "tail_id": pl.String})

    users = dense_ids(distinct_tokens(inter_tokens, "user_id"))
    items = dense_ids(pl.concat([distinct_tokens(inter_tokens, "item_id"), link["item_id"]]))
    linked = to_ids(link, "item_id", items).select(token="entity_id", id="item_id")
    entities = entity_ids(pl.concat([distinct_tokens(kg_tokens, "head_id"), distinct_tokens(kg_tokens, "tail_id")]), linked, items.height)
    relations = dense_ids(distinct_tokens(kg_tokens, "relation_id"))

    interactions = to_ids(to_ids(inter_tokens, "user_id", users), "item_id", items)
    triples = to_ids(to_ids(to_ids(kg_tokens, "head_id", entities), "tail_id", entities), "relation_id", relations)
    entity_names = pl.concat([entities, linked.select("token", "id")]).unique("id", keep="first")
    return RawData(
        source_format="recbole",
        interactions=scratch.keep(
            interactions.select(user="user_id", item="item_id", split=pl.lit(None, pl.Int8), timestamp="timestamp"), "interactions"
        ),
        triples=scratch.keep(triples.select(head="head_id", relation="relation_id", tail="tail_id"), "triples"),
        sources=list(files.values()),
        n_users=users.height,
        n_items=items.height,
        n_entities=items.height + entities.height - linked.height,
        n_relations=relations.height,
        names={
            "users": users.select("id", name="token"),
            "items": items.select("id", name="token"),
            "entities": entity_names.select("id", name="token"),
            "relations": relations.select("id", name="token"),
        },
    )


def _timestamps(frame: pl.DataFrame, path: Path) -> pl.Series:
    """The `timestamp` column as Float64 (all null when the file has none); refuses non-numbers."""
    if "timestamp" not in frame.columns:
        return pl.Series("timestamp", [None] * frame.height, dtype=pl.Float64)
    parsed = frame["timestamp"].cast(pl.Float64, strict=False)
    bad = frame.filter(parsed.is_null() & frame["timestamp"].is_not_null())
    if bad.height:
        raise IngestError(path, int(bad["line"][0]), f"timestamp {bad['timestamp'][0][:40]!r} is not a number")
    return parsed.alias("timestamp")


def _checked_links(link: pl.DataFrame, path: Path) -> pl.DataFrame:
    """Distinct (item, entity) links; an item or entity linked twice to different partners is refused."""
    link = link.unique(["item_id", "entity_id"], keep="first", maintain_order=True)
    for column, other in (("item_id", "entity_id"), ("entity_id", "item_id")):
        twice = link.filter(pl.col(column).is_duplicated())
        if twice.height:
            same = twice.filter(pl.col(column) == twice[column][0])
            first, second = same.row(0, named=True), same.row(1, named=True)
            raise IngestError(
                path,
                second["line"],
                f"{column.split('_')[0]} {second[column]!r} is linked to {first[other]!r} (line {first['line']}) and to {second[other]!r}; keep one link per item and entity",
            )
    return link.select("item_id", "entity_id")
