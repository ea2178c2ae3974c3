"""One reader per raw format, and detection of the format from the file names of a raw dir."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kg_data.errors import IngestError
from kg_data.formats.kgat import read_kgat
from kg_data.formats.kgcn import read_kgcn
from kg_data.formats.recbole import read_recbole
from kg_data.formats.triples import EXTENSIONS, read_plain
from kg_data.progress import FileProgress
from kg_data.schema import RawData
from kg_data.staging import Scratch

Reader = Callable[[Path, FileProgress, Scratch], RawData]

READERS: dict[str, Reader] = {
    "kgat": read_kgat,
    "kgcn": read_kgcn,
    "recbole": read_recbole,
    "triples": read_plain,
}
FORMATS = tuple(READERS)

#: What each format's dir is recognised by (any one of these file names or suffixes).
_SIGNATURES = {
    "kgat": ("train.txt", "test.txt"),
    "kgcn": ("ratings_final.txt",),
    "recbole": (".inter",),
    "triples": tuple(f"interactions{ext}" for ext in EXTENSIONS),
}
_EXPECTED = (
    "KGAT (train.txt, test.txt, kg_final.txt), KGCN (ratings_final.txt, kg_final.txt), "
    "RecBole (NAME.inter, NAME.kg, NAME.link) or plain tables (interactions.csv|tsv|parquet, triples.csv|tsv|parquet)"
)


def detect_format(raw_dir: Path) -> str:
    """The format whose files the dir holds; refuses a dir that matches none or several."""
    names = {p.name for p in raw_dir.iterdir() if p.is_file()}
    if not names:
        raise IngestError(raw_dir, None, f"directory holds no files; expected {_EXPECTED}")

    def matches(signature: tuple[str, ...]) -> bool:
        return any(s in names if not s.startswith(".") else any(n.endswith(s) for n in names) for s in signature)

    found = [fmt for fmt, signature in _SIGNATURES.items() if matches(signature)]
    if len(found) > 1:
        raise IngestError(raw_dir, None, f"files of several formats ({', '.join(found)}); pass --format to choose one")
    if not found:
        hint = " (kg_final.txt alone is not enough: KGAT also needs train.txt and test.txt, KGCN ratings_final.txt)" if "kg_final.txt" in names else ""
        shown = ", ".join(sorted(names)[:6]) + (", ..." if len(names) > 6 else "")
        raise IngestError(raw_dir, None, f"unknown format: found {shown}{hint}; expected {_EXPECTED}")
    return found[0]


def read_raw(raw_dir: Path, fmt: str, progress: FileProgress, scratch: Scratch | None = None) -> RawData:
    """Run the reader of `fmt` ("auto" detects it) over `raw_dir`; what it parses goes to `scratch`."""
    if fmt == "auto":
        fmt = detect_format(raw_dir)
    reader = READERS.get(fmt)
    if reader is None:
        raise IngestError(raw_dir, None, f"unknown format {fmt!r}; choose one of auto, {', '.join(FORMATS)}")
    return reader(raw_dir, progress, scratch or Scratch())
