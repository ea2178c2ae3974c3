"""Streaming ingest (text blocks, id buckets on disk, batched writes) writes the tables that the
in-memory ingest wrote before it, whatever the sizes of the pieces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kg_data import assemble as assemble_module
from kg_data import buckets, ingest, writer
from kg_data.formats import _text


def kgat_pairs(raw: Path) -> list[tuple[int, int, str]]:
    """(user, item, split) of a KGAT dir in file order: train, valid, test."""
    rows = []
    for split in ("train", "valid", "test"):
        path = raw / f"{split}.txt"
        if path.exists():
            for line in path.read_text().splitlines():
                user, *items = map(int, line.split())
                rows += [(user, item, split) for item in items]
    return rows


def kgcn_dir(tiny_raw_dir: Path, root: Path) -> Path:
    """The tiny KGAT pairs as KGCN ratings, every 7th pair repeated a few lines later, a negative per 5."""
    root.mkdir()
    pairs = [(u, i) for u, i, _ in kgat_pairs(tiny_raw_dir)]
    lines = []
    for n, (u, i) in enumerate(pairs):
        lines += [f"{u}\t{i}\t1"] + ([f"{u}\t{(i + 1) % 300}\t0"] if n % 5 == 0 else [])
        if n % 7 == 3:
            lines.append(
                f"{pairs[n - 3][0]}\t{pairs[n - 3][1]}\t1"
            )  # a repeat: shifts the rows after it
    (root / "ratings_final.txt").write_text("\n".join(lines) + "\n")
    (root / "kg_final.txt").write_text(
        (tiny_raw_dir / "kg_final.txt").read_text() + "0 0 400\n0 0 400\n"
    )  # a repeated triple
    return root


def plain_dir(tiny_raw_dir: Path, root: Path) -> Path:
    """The tiny KGAT pairs as a plain TSV table with string tokens and timestamps that tie."""
    root.mkdir()
    pairs = kgat_pairs(tiny_raw_dir)
    rows = "".join(f"u{u}\ts{i}\t{(u * 31 + i * 7) % 23}\n" for u, i, _ in pairs)
    (root / "interactions.tsv").write_text("user\titem\ttimestamp\n" + rows)
    triples = (tiny_raw_dir / "kg_final.txt").read_text().split()
    heads, relations, tails = triples[0::3], triples[1::3], triples[2::3]
    token = lambda e: f"s{e}" if int(e) < 300 else f"e{e}"  # noqa: E731 - items are entities 0..299
    (root / "triples.tsv").write_text(
        "head\trelation\ttail\n"
        + "".join(
            f"{token(h)}\tr{r}\t{token(t)}\n"
            for h, r, t in zip(heads, relations, tails, strict=True)
        )
    )
    return root


def small_pieces(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Text blocks of 512 bytes, buckets of ~150 rows, batches of 100 rows; returns the bucket counts."""
    monkeypatch.setattr(_text, "BLOCK_BYTES", 512)
    monkeypatch.setattr(buckets, "ROWS_PER_BUCKET", 150)
    monkeypatch.setattr(buckets, "_BATCH_ROWS", 100)
    monkeypatch.setattr(writer, "_BATCH_ROWS", 100)
    monkeypatch.setattr(assemble_module, "_BATCH_ROWS", 100)
    made: list[int] = []
    original = buckets.range_buckets

    def counted(*args: object, **kwargs: object) -> list:
        found = original(*args, **kwargs)
        made.append(len(found))
        return found

    monkeypatch.setattr(assemble_module, "range_buckets", counted)
    return made


def written(out: Path) -> dict[str, object]:
    tables: dict[str, object] = {p.name: pl.read_parquet(p) for p in sorted(out.glob("*.parquet"))}
    tables["metadata.json"] = json.loads((out / "metadata.json").read_text())
    return tables


@pytest.mark.parametrize(
    ("make", "split"),
    [(None, "given"), (kgcn_dir, "per_user_random"), (plain_dir, "per_user_by_timestamp")],
)
def test_small_blocks_and_buckets_write_the_same_dataset_as_one_piece(
    tiny_raw_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: object, split: str
) -> None:
    raw = tiny_raw_dir if make is None else make(tiny_raw_dir, tmp_path / "raw")  # type: ignore[operator]
    whole = written(ingest(raw, tmp_path / "whole", progress=False).path)
    made = small_pieces(monkeypatch)
    pieces = written(ingest(raw, tmp_path / "pieces", progress=False).path)
    assert min(made) >= 5  # triples and interactions really went through several buckets on disk
    assert whole["metadata.json"]["split"]["method"] == split  # type: ignore[index]
    assert pieces.keys() == whole.keys()
    for name, value in whole.items():
        assert (
            pieces[name].equals(value) if isinstance(value, pl.DataFrame) else pieces[name] == value
        ), name


def old_random_split(pairs: list[tuple[int, int]], seed: int) -> list[tuple[int, int, str]]:
    """The split the in-memory ingest made before streaming (kept here as the reference): distinct
    pairs in file order, one number per pair from `default_rng(seed)`, each user's pairs ordered by it
    and cut with half-up rounding of 0.8/0.1/0.1, rows sorted by split, user, item."""
    distinct = list(dict.fromkeys(pairs))
    keys = np.random.default_rng(seed).random(len(distinct))
    by_user: dict[int, list[tuple[float, int, int]]] = {}
    for row, ((user, item), key) in enumerate(zip(distinct, keys, strict=True)):
        by_user.setdefault(user, []).append((key, row, item))
    rows = []
    for user, entries in by_user.items():
        n = len(entries)
        test, valid = int(n * 0.1 + 0.5), int(n * 0.1 + 0.5)
        train = max(n - test - valid, 1)
        valid = min(valid, n - train)
        for position, (_, _, item) in enumerate(sorted(entries)):
            rows.append(
                (
                    user,
                    item,
                    "train"
                    if position < train
                    else "valid"
                    if position < train + valid
                    else "test",
                )
            )
    order = {"train": 0, "valid": 1, "test": 2}
    return sorted(rows, key=lambda r: (order[r[2]], r[0], r[1]))


def test_streamed_random_split_equals_the_old_in_memory_split(
    tiny_raw_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repeated pairs do not shift the random numbers of the pairs after them (one number per distinct pair)."""
    raw = kgcn_dir(tiny_raw_dir, tmp_path / "raw")
    small_pieces(monkeypatch)
    out = ingest(raw, tmp_path / "out", seed=11, progress=False)
    pairs = [
        (u, i)
        for u, i, label in (
            map(int, line.split()) for line in (raw / "ratings_final.txt").read_text().splitlines()
        )
        if label == 1
    ]
    assert pl.read_parquet(out.path / "interactions.parquet").rows() == old_random_split(
        pairs, seed=11
    )
    assert out.metadata["dropped"]["duplicate_interactions"] == len(pairs) - len(set(pairs)) > 0
    triples = [
        tuple(map(int, line.split())) for line in (raw / "kg_final.txt").read_text().splitlines()
    ]
    assert pl.read_parquet(out.path / "triples.parquet").rows() == list(dict.fromkeys(triples))


def test_streamed_given_splits_keep_the_file_order(
    tiny_raw_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_pieces(monkeypatch)
    out = ingest(tiny_raw_dir, tmp_path / "out", progress=False)
    assert pl.read_parquet(out.path / "interactions.parquet").rows() == kgat_pairs(tiny_raw_dir)
