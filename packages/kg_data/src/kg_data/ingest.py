"""`kg_data.ingest`: a raw KG-recommendation dir -> a validated Parquet dataset dir.

Steps: check the arguments and the destination (fail fast, before any parsing), detect the format,
read it block by block with its reader (`kg_data.formats`) into scratch tables, deduplicate, drop,
split and size it (`kg_data.assemble`), hash the source files, and write the tables. Everything
happens inside a hidden temporary sibling of the destination (`kg_data.writer`), scratch tables
included, which is renamed into place at the end or removed when anything fails; memory stays
bounded by the block and bucket sizes and the id spaces, not by the size of the raw files.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kg_data.assemble import assemble
from kg_data.errors import IngestError, KGDataError
from kg_data.formats import FORMATS, read_raw
from kg_data.progress import FileProgress
from kg_data.splits import SplitOptions
from kg_data.staging import Scratch
from kg_data.writer import check_destination, file_digest, staging_dir, write_tables


@dataclass(frozen=True)
class DatasetInfo:
    """Where the dataset was written and its metadata (the content of its `metadata.json`)."""

    path: Path
    metadata: dict


def ingest(
    raw_dir: str | Path,
    out_dir: str | Path,
    *,
    format: str = "auto",  # noqa: A002 - the CLI's --format, same name on purpose
    overwrite: bool = False,
    split: str = "auto",
    split_ratios: Sequence[float] = (0.8, 0.1, 0.1),
    split_rounding: str = "half-up",
    seed: int = 0,
    drop_unlinked_items: bool = False,
    progress: bool = True,
) -> DatasetInfo:
    """Ingest `raw_dir` (KGAT, KGCN, RecBole atomic or plain tables) into the dataset dir `out_dir`.

    `split`: "auto" keeps the splits the data gives (KGAT files, a `split` column) and otherwise splits
    each user's interactions by timestamp when all have one, else randomly with `seed`; "time" and
    "random" force that per-user split (pooling given splits). `split_ratios` (train, valid, test) and
    `split_rounding` ("half-up", or RecBole's "down") say how many go where (`kg_data.splits`).
    `drop_unlinked_items` drops the interactions of items that occur in no triple, as RecBole's KG
    datasets do. Raises `KGDataError` (an `IngestError` naming file and line for bad input); then
    nothing is written.
    """
    raw, out = Path(raw_dir), Path(out_dir)
    if format not in ("auto", *FORMATS):
        raise KGDataError(f"unknown format {format!r}; choose one of auto, {', '.join(FORMATS)}")
    options = SplitOptions(method=split, ratios=split_ratios, rounding=split_rounding, seed=seed)  # type: ignore[arg-type]
    if not isinstance(drop_unlinked_items, bool):
        raise KGDataError(f"'drop_unlinked_items' needs to be True or False (got {drop_unlinked_items!r})")
    if not raw.exists():
        raise IngestError(raw, None, "no such directory; give the folder that holds the raw files")
    if not raw.is_dir():
        raise IngestError(raw, None, "not a directory; give the folder that holds the raw files")
    if not any(p.is_file() for p in raw.iterdir()):
        raise IngestError(raw, None, "directory holds no files; give the folder that holds the raw files")
    check_destination(out, overwrite=overwrite)

    # Source files are hashed on a side thread while Polars parses (hashlib releases the GIL).
    hasher = ThreadPoolExecutor(max_workers=1)
    try:
        digests = {path: hasher.submit(file_digest, path) for path in sorted(p for p in raw.iterdir() if p.is_file())}
        with staging_dir(out, overwrite=overwrite) as tmp, FileProgress(raw, enabled=progress) as bar:
            scratch = Scratch(tmp / "_scratch")
            data = read_raw(raw, format, bar, scratch)
            tables, metadata = assemble(data, options, scratch, drop_unlinked_items=drop_unlinked_items, progress=bar)
            metadata["sources"] = {path.name: digests[path].result() for path in data.sources}
            bar.stage("writing")
            write_tables(tmp, tables, metadata)
            scratch.remove()
    finally:
        hasher.shutdown(cancel_futures=True)
    return DatasetInfo(path=out, metadata=metadata)
