"""`KGDataset`: read access to a dataset dir written by `kg_data.ingest`.

Frames are lazy (`pl.scan_parquet`), so opening a dataset costs only reading `metadata.json`; the
numpy accessors read just the columns they return. `fingerprint` identifies the content, for caches.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path

import numpy as np
import polars as pl

from kg_data.errors import KGDataError
from kg_data.schema import FORMAT_VERSION, METADATA_FILE, SPLITS, TABLES

_HOW_TO_MAKE = "create one with: python -m pipelines.ingest RAW --out DIR"


class KGDataset:
    """An opened dataset dir. Use `KGDataset.open(dir)`."""

    def __init__(self, path: Path, metadata: dict) -> None:
        self.path = path
        self.metadata = metadata

    @classmethod
    def open(cls, path: str | Path) -> KGDataset:
        """Open `path`; raises `KGDataError` for a dir that ingest did not write (or wrote in another version)."""
        path = Path(path)
        if not path.is_dir():
            raise KGDataError(f"{path}: no such dataset dir; {_HOW_TO_MAKE}")
        meta_file = path / METADATA_FILE
        try:
            metadata = json.loads(meta_file.read_text())
        except FileNotFoundError:
            raise KGDataError(f"{path} is not a dataset dir (no {METADATA_FILE}); {_HOW_TO_MAKE}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise KGDataError(f"{meta_file}: not valid JSON ({exc}); re-create the dir with pipelines.ingest") from None
        if not isinstance(metadata, dict) or metadata.get("format_version") != FORMAT_VERSION:
            found = metadata.get("format_version") if isinstance(metadata, dict) else None
            raise KGDataError(f"{meta_file}: format_version {found!r}, this kg_data reads {FORMAT_VERSION}; re-run pipelines.ingest")
        missing = [name for name in TABLES if not (path / name).is_file()]
        if missing:
            raise KGDataError(f"{path} lacks {', '.join(missing)}; re-create it with pipelines.ingest --overwrite")
        return cls(path, metadata)

    # -- sizes ---------------------------------------------------------------------------------
    @property
    def n_users(self) -> int:
        return int(self.metadata["n_users"])

    @property
    def n_items(self) -> int:
        return int(self.metadata["n_items"])

    @property
    def n_entities(self) -> int:
        return int(self.metadata["n_entities"])

    @property
    def n_relations(self) -> int:
        """KG relations only (the collaborative graph adds its own interaction relations)."""
        return int(self.metadata["n_relations"])

    @property
    def n_triples(self) -> int:
        return int(self.metadata["n_triples"])

    def n_interactions(self, split: str | None = None) -> int:
        counts = self.metadata["n_interactions"]
        return sum(counts.values()) if split is None else int(counts[_check_split(split)])

    # -- frames --------------------------------------------------------------------------------
    def interactions(self, split: str | None = None) -> pl.LazyFrame:
        """(`user`, `item`, `split`) rows, all of them or one split's."""
        frame = pl.scan_parquet(self.path / "interactions.parquet")
        return frame if split is None else frame.filter(pl.col("split") == _check_split(split))

    def triples(self) -> pl.LazyFrame:
        """(`head`, `relation`, `tail`) rows, sorted by head, relation, tail."""
        return pl.scan_parquet(self.path / "triples.parquet")

    def users(self) -> pl.LazyFrame:
        return pl.scan_parquet(self.path / "users.parquet")

    def items(self) -> pl.LazyFrame:
        return pl.scan_parquet(self.path / "items.parquet")

    def entities(self) -> pl.LazyFrame:
        return pl.scan_parquet(self.path / "entities.parquet")

    def relations(self) -> pl.LazyFrame:
        return pl.scan_parquet(self.path / "relations.parquet")

    # -- arrays --------------------------------------------------------------------------------
    def pairs(self, split: str | None = None) -> np.ndarray:
        """(user, item) pairs of `split` (all when None) as an int64 array of shape (n, 2)."""
        frame = self.interactions(split).select("user", "item").collect()
        return frame.to_numpy().astype(np.int64, copy=False).reshape(-1, 2)

    def triples_array(self) -> np.ndarray:
        """(head, relation, tail) rows as an int64 array of shape (n, 3)."""
        return self.triples().collect().to_numpy().astype(np.int64, copy=False).reshape(-1, 3)

    # -- identity ------------------------------------------------------------------------------
    @cached_property
    def fingerprint(self) -> str:
        """sha256 over the bytes of every Parquet file and the metadata (16 hex digits).

        Changes whenever a file's content changes; the same content (e.g. a re-ingest of the same raw
        files) gives the same fingerprint. Hashing reads every file once (about 1 s per GB).
        """
        digest = hashlib.sha256()
        for name in sorted([*TABLES, METADATA_FILE]):
            digest.update(name.encode() + b"\0")
            with (self.path / name).open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
        return digest.hexdigest()[:16]

    def stats(self) -> dict[str, int]:
        """The headline counts, in the order the CLI prints them."""
        m = self.metadata
        return {
            "users": m["n_users"],
            "items": m["n_items"],
            "entities": m["n_entities"],
            "relations": m["n_relations"],
            "triples": m["n_triples"],
            **{f"interactions ({s})": m["n_interactions"][s] for s in SPLITS},
        }

    def __repr__(self) -> str:
        return (
            f"KGDataset({str(self.path)!r}, users={self.n_users}, items={self.n_items}, "
            f"entities={self.n_entities}, relations={self.n_relations}, triples={self.n_triples}, "
            f"interactions={self.n_interactions()})"
        )


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise KGDataError(f"'split' needs to be one of {', '.join(SPLITS)} (got {split!r})")
    return split
