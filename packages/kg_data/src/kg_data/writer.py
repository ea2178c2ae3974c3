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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

from kg_data.errors import KGDataError
from kg_data.schema import METADATA_FILE


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


def write_dataset(out: Path, tables: dict[str, pl.DataFrame], metadata: dict, *, overwrite: bool) -> None:
    """Write the Parquet `tables` and `metadata.json` to `out`, atomically as seen from readers."""
    check_destination(out, overwrite=overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        # Polars releases the GIL while it encodes: the tables are written side by side.
        with ThreadPoolExecutor(max_workers=len(tables)) as pool:
            written = [pool.submit(frame.write_parquet, tmp / name, compression="zstd", statistics=True) for name, frame in tables.items()]
            for future in written:
                future.result()
        (tmp / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")
        _move_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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
