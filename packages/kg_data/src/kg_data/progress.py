"""A progress bar over the bytes of the raw files an ingest reads (tqdm, on stderr)."""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm


class FileProgress:
    """Readers call `advance(path, n)` as they read blocks of a file and `done(path)` when it is parsed;
    the bar counts each file's bytes once either way."""

    def __init__(self, raw_dir: Path, *, enabled: bool) -> None:
        total = sum(p.stat().st_size for p in raw_dir.iterdir() if p.is_file())
        self._bar = tqdm(total=total, unit="B", unit_scale=True, desc=f"ingest {raw_dir.name}", disable=not enabled, leave=False)
        self._counted: dict[Path, int] = {}

    def advance(self, path: Path, n_bytes: int) -> None:
        self._counted[path] = self._counted.get(path, 0) + n_bytes
        self._bar.set_postfix_str(path.name, refresh=False)
        self._bar.update(n_bytes)

    def done(self, path: Path) -> None:
        rest = path.stat().st_size - self._counted.get(path, 0)
        self._counted[path] = path.stat().st_size
        self._bar.set_postfix_str(path.name, refresh=False)
        if rest > 0:
            self._bar.update(rest)

    def stage(self, what: str) -> None:
        """Name the step after parsing (deduplicating, splitting, writing) in the bar's postfix."""
        self._bar.set_postfix_str(what)

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
        self._counted = {}
