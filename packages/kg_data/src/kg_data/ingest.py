"""`kg_data.ingest`: a raw KG-recommendation dir -> a validated Parquet dataset dir.

Steps: check the arguments and the destination (fail fast, before any parsing), detect the format,
read it with its reader (`kg_data.formats`), deduplicate, split and size it (`kg_data.assemble`),
hash the source files, and write everything at once (`kg_data.writer`).
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
from kg_data.splits import check_ratios
from kg_data.writer import check_destination, file_digest, write_dataset


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
    seed: int = 0,
    split: Sequence[float] = (0.8, 0.1, 0.1),
    progress: bool = True,
) -> DatasetInfo:
    """Ingest `raw_dir` (KGAT, KGCN, RecBole atomic or plain tables) into the dataset dir `out_dir`.

    `split` (train, valid, test shares) and `seed` are used only when the raw data has no splits.
    Raises `KGDataError` (an `IngestError` naming file and line for bad input); then nothing is
    written.
    """
    raw, out = Path(raw_dir), Path(out_dir)
    if format not in ("auto", *FORMATS):
        raise KGDataError(f"unknown format {format!r}; choose one of auto, {', '.join(FORMATS)}")
    ratios = check_ratios(split)
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
        with FileProgress(raw, enabled=progress) as bar:
            data = read_raw(raw, format, bar)
            tables, metadata = assemble(data, ratios, seed)
        metadata["sources"] = {path.name: digests[path].result() for path in data.sources}
    finally:
        hasher.shutdown(cancel_futures=True)
    write_dataset(out, tables, metadata, overwrite=overwrite)
    return DatasetInfo(path=out, metadata=metadata)
