"""Range buckets: rows too many for memory, cut by one id column into pieces that fit, in id order.

Deduplication and per-user splits need all rows of a key (a pair, a triple, a user) side by side.
Instead of hashing every row in memory at once, the rows are written to scratch tables by ranges of
one id column (users for interactions, heads for triples), about `ROWS_PER_BUCKET` rows each, and
each bucket is then worked on in memory alone. Ranges keep the id order, so results sorted by that
column within each bucket are sorted overall when the buckets are concatenated. Data that fits one
bucket skips the partition pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import polars as pl

from kg_data.staging import Scratch, ScratchTable, iter_batches

#: Rows per bucket: a bucket's in-memory work (sorts, hashes) takes roughly 100 bytes a row.
ROWS_PER_BUCKET = 2_000_000
_HISTOGRAM_BINS = 1 << 16
_BATCH_ROWS = 1 << 20

Decorate = Callable[[pl.DataFrame], pl.DataFrame]


def range_buckets(
    frame: pl.LazyFrame,
    column: str,
    scratch: Scratch,
    *,
    decorate: Decorate | None = None,
    rows_per_bucket: int | None = None,
) -> list[ScratchTable]:
    """`frame`'s rows in buckets of consecutive ranges of `column` (non-negative ints), ascending;
    read each with `collect()`.

    Every row gets `_row`, its 0-based position in `frame`, and the columns `decorate(batch)` adds;
    `decorate` sees the rows in batches in frame order (so a random stream gives each row the same
    number however the rows are bucketed). Within a bucket, rows keep their order. `rows_per_bucket`
    defaults to `ROWS_PER_BUCKET` (read at call time).
    """
    rows, top = frame.select(pl.len(), pl.col(column).max()).collect(engine="streaming").row(0)
    inner = _inner_bounds(frame, column, rows, top, rows_per_bucket or ROWS_PER_BUCKET)
    if len(inner) == 0:
        whole = ScratchTable(None)
        whole.write(_decorated(frame.collect(engine="streaming"), 0, decorate))
        return [whole]
    tables = [scratch.table(f"bucket-{column}-{i}", kind="bucket") for i in range(len(inner) + 1)]
    offset = 0
    for batch in iter_batches(frame, _BATCH_ROWS):
        batch = _decorated(batch, offset, decorate)
        offset += batch.height
        which = np.searchsorted(inner, batch[column].to_numpy(), side="right")
        counts = np.bincount(which, minlength=len(tables))
        ordered = (
            batch if np.all(which[1:] >= which[:-1]) else batch[np.argsort(which, kind="stable")]
        )
        start = 0
        for table, count in zip(tables, counts, strict=True):
            table.write(ordered.slice(start, int(count)))  # an empty slice still fixes the schema
            start += int(count)
    return tables


def _decorated(batch: pl.DataFrame, offset: int, decorate: Decorate | None) -> pl.DataFrame:
    batch = batch.with_columns(_row=pl.int_range(offset, offset + batch.height, dtype=pl.Int64))
    return decorate(batch) if decorate is not None else batch


def _inner_bounds(
    frame: pl.LazyFrame, column: str, rows: int, top: int | None, rows_per_bucket: int
) -> np.ndarray:
    """The values at which a new bucket starts (empty: one bucket), from a histogram of `column`:
    cut where the running count passes each multiple of rows / n_buckets. One id's rows stay in one
    bucket, so a bucket can exceed the target when a single id is that frequent."""
    if rows <= rows_per_bucket or top is None:
        return np.empty(0, dtype=np.int64)
    n_buckets = math.ceil(rows / rows_per_bucket)
    width = max(1, math.ceil((top + 1) / _HISTOGRAM_BINS))
    histogram = (
        frame.select((pl.col(column) // width).cast(pl.Int64).alias("bin"))
        .group_by("bin")
        .len()
        .collect(engine="streaming")
    )
    counts = np.zeros(_HISTOGRAM_BINS + 1, dtype=np.int64)
    counts[histogram["bin"].to_numpy()] = histogram["len"].to_numpy()
    cumulative = np.cumsum(counts)
    targets = rows * np.arange(1, n_buckets) / n_buckets
    starts = (np.searchsorted(cumulative, targets, side="left") + 1) * width
    return np.unique(starts[(starts > 0) & (starts <= top)]).astype(np.int64)
