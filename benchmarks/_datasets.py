"""Shared real datasets, ingested once into a cache dir that the benchmarks reuse.

`prepare_dataset("lfm1m-kgat")` ingests `../shared/data/lfm1m-kgat` (through `kg_data.ingest`, the
code of `pipelines.ingest`) into `data/bench/lfm1m-kgat` (gitignored; `TINYKG_BENCH_DATA` moves it)
and reuses that dir while the raw files' sha256s match the ones its metadata records. Where the raw
dir is absent (e.g. on a GPU machine that was only given the cache dir) an existing cache is used as
it is. A path to a dir written by ingest may stand in for a name (small runs, tests).
"""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks._report import REPO_ROOT, SHARED_DATA

BENCH_DATA = Path(os.environ.get("TINYKG_BENCH_DATA", REPO_ROOT / "data" / "bench"))


class DatasetUnavailable(RuntimeError):
    """Neither the raw shared data nor an ingested copy of it is present."""


def cache_is_current(dataset, raw: Path) -> bool:
    """Whether an ingested dir was made from exactly the files now in `raw` (the digests ingest
    recorded in its metadata, computed the same way)."""
    from kg_data.writer import file_digest

    sources = dataset.metadata.get("sources", {})
    return bool(sources) and all(
        (raw / name).is_file() and file_digest(raw / name) == source
        for name, source in sources.items()
    )


def open_cached(path: Path):
    """The `KGDataset` at `path`, or None when there is none (or a broken one)."""
    from kg_data import KGDataset
    from kg_data.errors import KGDataError

    if not path.is_dir():
        return None
    try:
        return KGDataset.open(path)
    except KGDataError:
        return None


def prepare_dataset(
    name: str, cache_root: Path | None = None, raw_root: Path | None = None
) -> Path:
    """The ingested dir of shared dataset `name` (ingesting it first when needed)."""
    import kg_data

    out = (cache_root or BENCH_DATA) / name
    raw = (raw_root or SHARED_DATA) / name
    cached = open_cached(out)
    if cached is not None and (not raw.is_dir() or cache_is_current(cached, raw)):
        return out
    if not raw.is_dir():
        raise DatasetUnavailable(
            f"dataset {name!r}: no raw dir at {raw} and no ingested copy at {out}; "
            "set TINYKG_SHARED_DATA or TINYKG_BENCH_DATA"
        )
    print(f"ingesting {raw} -> {out}", flush=True)
    kg_data.ingest(raw, out, overwrite=True, progress=False)
    return out


def resolve_dataset(spec: str) -> tuple[str, Path]:
    """(label, ingested dir) for a shared dataset name, or for the path of a dir written by ingest."""
    path = Path(spec)
    if (path / "metadata.json").is_file():
        return path.name, path
    return spec, prepare_dataset(spec)
