"""Write a dataset dir all at once: into a temporary sibling first, then renamed into place.

A failed ingest therefore leaves neither a half-written DIR nor its temporary sibling behind, and a
reader never sees a dir without its metadata. `--overwrite` swaps the dirs with two renames (old
one away, new one in) and only then deletes the old one; it refuses to replace a non-empty dir that
ingest did not write, so a typo in `--out` cannot wipe unrelated files.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from kg_data.errors import KGDataError
from kg_data.schema import METADATA_FILE
from kg_data.staging import iter_batches

_BATCH_ROWS = 1 << 20


def check_destination(out: Path, *, overwrite: bool) -> None:
    """Refuse an `out` that exists (unless `overwrite`) or that is not safe to replace."""
    if not out.exists() and not out.is_symlink():
        return
    if not overwrite:
        raise KGDataError(f"{out} already exists; pass --overwrite to replace it, or choose another --out")
    if not out.is_dir() or out.is_symlink():
        raise KGDataError(f"{out} exists and is not a directory; remove it or choose another --out")
    if any(out.iterdir()) and not (out / METADATA_FILE).is_file():
        raise KGDataError(
            f"{out} is not a dataset dir written by ingest (no {METADATA_FILE}); refusing to replace it: "
            "remove it yourself or choose another --out"
        )


@dataclass(frozen=True)
class LazyTable:
    """A table too large to hold: written from `frame` in batches. A column named in `labels` holds
    codes 0..k-1 and is written as the strings `labels[column][code]` (so no Polars string column of
    the table's length is ever built)."""

    frame: pl.LazyFrame
    labels: dict[str, Sequence[str]] = field(default_factory=dict)

    def collect(self) -> pl.DataFrame:
        """The whole table in memory, as it is written (for tests and small data)."""
        frame = self.frame.collect(engine="streaming")
        return frame.with_columns(
            pl.col(name).replace_strict(dict(enumerate(labels)), return_dtype=pl.String) for name, labels in self.labels.items()
        )


def write_dataset(out: Path, tables: dict[str, pl.DataFrame | LazyTable], metadata: dict, *, overwrite: bool) -> None:
    """Write the Parquet `tables` and `metadata.json` to `out`, atomically as seen from readers."""
    with staging_dir(out, overwrite=overwrite) as tmp:
        write_tables(tmp, tables, metadata)


@contextmanager
def staging_dir(out: Path, *, overwrite: bool) -> Iterator[Path]:
    """A hidden temporary sibling of `out` to build the dataset dir in; moved into place when the
    block ends, removed (with anything in it) when it raises."""
    check_destination(out, overwrite=overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        yield tmp
        check_destination(out, overwrite=overwrite)
        _move_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_tables(directory: Path, tables: dict[str, pl.DataFrame | LazyTable], metadata: dict) -> None:
    """The tables as Parquet files (lazy ones in batches) and `metadata.json`, written last."""
    frames = {name: frame for name, frame in tables.items() if isinstance(frame, pl.DataFrame)}
    for name, table in tables.items():
        if isinstance(table, LazyTable):
            _write_in_batches(table, directory / name)
    # Polars releases the GIL while it encodes: the small tables are written side by side.
    with ThreadPoolExecutor(max_workers=max(1, len(frames))) as pool:
        written = [pool.submit(frame.write_parquet, directory / name, compression="zstd", statistics=True) for name, frame in frames.items()]
        for future in written:
            future.result()
    (directory / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")


def _write_in_batches(table: LazyTable, path: Path) -> None:
    """One Parquet row group per batch, through pyarrow (Polars' own sink keeps far more memory when
    it builds string columns)."""
    writer = None
    try:
        for batch in iter_batches(table.frame, _BATCH_ROWS):
            arrow = batch.to_arrow()
            for name, labels in table.labels.items():
                index = arrow.schema.get_field_index(name)
                codes = arrow.column(index).combine_chunks()
                strings = pa.DictionaryArray.from_arrays(codes, pa.array(list(labels), pa.large_string())).cast(pa.large_string())
                arrow = arrow.set_column(index, name, strings)
            if writer is None:
                # Dictionary pages only where they pay (the label columns); for ids they cost time and no space.
                writer = pq.ParquetWriter(path, arrow.schema, compression="zstd", use_dictionary=list(table.labels), write_statistics=True)
            writer.write_table(arrow)
        if writer is None:  # no rows: an empty file of the right schema
            empty = table.frame.head(0).collect()
            empty.with_columns(pl.col(n).cast(pl.String) for n in table.labels).write_parquet(path, compression="zstd")
    finally:
        if writer is not None:
            writer.close()


def _move_into_place(tmp: Path, out: Path) -> None:
    if not out.exists():
        os.rename(tmp, out)
        return
    old = out.parent / f".{out.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)  # put the previous dataset back
        raise
    shutil.rmtree(old, ignore_errors=True)


def file_digest(path: Path) -> dict:
    """{"sha256": hex digest, "bytes": size} of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return {"sha256": digest.hexdigest(), "bytes": path.stat().st_size}
