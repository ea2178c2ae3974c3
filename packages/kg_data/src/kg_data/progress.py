"""A progress bar over the bytes of the raw files an ingest reads (tqdm, on stderr)."""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm


class FileProgress:
    """Readers call `done(path)` after parsing each file; the bar advances by the file's size."""

    def __init__(self, raw_dir: Path, *, enabled: bool) -> None:
        total = sum(p.stat().st_size for p in raw_dir.iterdir() if p.is_file())
        self._bar = tqdm(total=total, unit="B", unit_scale=True, desc=f"ingest {raw_dir.name}", disable=not enabled, leave=False)

    def done(self, path: Path) -> None:
        self._bar.set_postfix_str(path.name, refresh=False)
        self._bar.update(path.stat().st_size)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> FileProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NoProgress(FileProgress):
    """Silent stand-in for readers called outside an ingest (tests, notebooks)."""

    def __init__(self) -> None:
        self._bar = tqdm(disable=True)
