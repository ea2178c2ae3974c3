"""Scratch tables: what an ingest has parsed or partitioned so far, kept on disk so memory does not
grow with the input.

A reader appends each parsed block to a `ScratchTable`; `lazy()` scans it back in order as a
`pl.LazyFrame`, so every later step streams it, and `iter_batches` walks any lazy frame in bounded
batches. Without a scratch dir (a reader called on its own, as tests and notebooks do) the blocks
stay in memory and the same code runs.

Two file formats, chosen by what memory each costs here (measured with Polars 2.1 and pyarrow 25):
Parquet without dictionaries (`kind="stream"`) for tables that are scanned whole, since Polars reads
Parquet without mapping the file into memory; Arrow IPC (`kind="bucket"`) for the many tables a
partition pass fills at once, since an open IPC writer holds almost nothing, and each bucket is read
back whole with an ordinary read. Polars memory-maps IPC files it scans, which would count the whole
file in the process's resident memory.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

#: Scratch files are read back once or twice: fast compression beats small files here.
_COMPRESSION = "lz4"
_SUFFIX = {"stream": ".parquet", "bucket": ".arrow"}


class Scratch:
    """A dir of scratch tables (or, with `root=None`, tables kept in memory)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self._count = 0
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)

    def table(self, name: str, kind: str = "stream") -> ScratchTable:
        """A new empty table; `name` only makes the file recognisable (names may repeat)."""
        self._count += 1
        path = None if self.root is None else self.root / f"{self._count:05d}-{name}{_SUFFIX[kind]}"
        return ScratchTable(path, kind)

    def keep(self, frame: pl.LazyFrame, name: str) -> pl.LazyFrame:
        """Run `frame` once on the streaming engine into a scratch table, so later scans do not redo it."""
        if self.root is None:
            return frame.collect(engine="streaming").lazy()
        self._count += 1
        path = self.root / f"{self._count:05d}-{name}.parquet"
        frame.sink_parquet(path, compression=_COMPRESSION, statistics=False)
        return pl.scan_parquet(path)

    def remove(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


class ScratchTable:
    """Frames appended in order, read back as one frame. Every frame must have the same columns;
    dtypes follow the first frame's (later frames are cast to them)."""

    def __init__(self, path: Path | None, kind: str = "stream") -> None:
        self._path = path
        self._kind = kind
        self._frames: list[pl.DataFrame] = []
        self._writer: pq.ParquetWriter | ipc.RecordBatchFileWriter | None = None
        self._arrow_schema: pa.Schema | None = None
        self._schema: pl.Schema | None = None
        self._closed = False
        self.rows = 0

    def write(self, frame: pl.DataFrame) -> None:
        if self._closed:
            raise RuntimeError("ScratchTable.write after it was read: the table is closed")
        if self._schema is None:
            self._schema = frame.schema
        elif frame.schema != self._schema:
            frame = frame.select(pl.col(name).cast(dtype) for name, dtype in self._schema.items())
        if frame.height == 0:
            return
        self.rows += frame.height
        if self._path is None:
            self._frames.append(frame)
            return
        table = frame.to_arrow()
        if self._writer is None:
            self._arrow_schema = table.schema
            if self._kind == "bucket":
                self._writer = ipc.new_file(
                    str(self._path),
                    table.schema,
                    options=ipc.IpcWriteOptions(compression=_COMPRESSION),
                )
            else:
                self._writer = pq.ParquetWriter(
                    self._path,
                    table.schema,
                    compression=_COMPRESSION,
                    use_dictionary=False,
                    write_statistics=False,
                )
        self._writer.write_table(
            table if table.schema == self._arrow_schema else table.cast(self._arrow_schema)
        )

    def lazy(self, schema: dict[str, pl.DataType] | None = None) -> pl.LazyFrame:
        """Everything written, in order (an empty frame of `schema` when nothing was); closes the table."""
        self._close()
        if self.rows == 0:
            return pl.LazyFrame(schema=self._schema if self._schema is not None else schema)
        if self._path is None:
            return pl.concat(self._frames, rechunk=False).lazy()
        if self._kind == "bucket":
            return self.collect().lazy()
        return pl.scan_parquet(self._path)

    def collect(self, schema: dict[str, pl.DataType] | None = None) -> pl.DataFrame:
        """Everything written, in memory (for a bucket: it is sized to fit)."""
        self._close()
        if self.rows == 0:
            return pl.DataFrame(schema=self._schema if self._schema is not None else schema)
        if self._path is None:
            return pl.concat(self._frames)
        if self._kind == "bucket":
            with pa.OSFile(str(self._path)) as handle:  # a plain read: no memory map
                return pl.from_arrow(ipc.open_file(handle).read_all())  # type: ignore[return-value]
        return pl.read_parquet(self._path)

    def remove(self) -> None:
        """Drop what was written (its file), once it is no longer needed."""
        self._close()
        self._frames = []
        if self._path is not None:
            self._path.unlink(missing_ok=True)

    def _close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def iter_batches(frame: pl.LazyFrame, rows: int) -> Iterator[pl.DataFrame]:
    """`frame` in consecutive batches of `rows` rows, each computed on its own (a slice that Polars
    pushes down to the Parquet scan). Not `LazyFrame.collect_batches`: it runs ahead of a slow
    consumer and buffers, so its memory grows with the table."""
    offset = 0
    while True:
        batch = frame.slice(offset, rows).collect(engine="streaming")
        if batch.height:
            yield batch
        if batch.height < rows:
            return
        offset += batch.height
