"""Plain tables (interactions + triples as CSV, TSV or Parquet) with string tokens."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl
import pytest

from kg_data import KGDataset, ingest
from kg_data.errors import IngestError
from kg_data.formats.triples import read_plain


def plain_dir(root: Path, ext: str, interactions: pl.DataFrame, triples: pl.DataFrame) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for stem, frame in (("interactions", interactions), ("triples", triples)):
        path = root / f"{stem}.{ext}"
        if ext == "parquet":
            frame.write_parquet(path)
        else:
            frame.write_csv(path, separator="," if ext == "csv" else "\t")
    return root


INTERACTIONS = pl.DataFrame({"user": ["ann", "bob", "ann"], "item": ["song:b", "song:a", "song:a"]})
TRIPLES = pl.DataFrame(
    {"head": ["song:a", "song:b", "rock"], "relation": ["genre", "genre", "parent"], "tail": ["rock", "rock", "music"]}
)


@pytest.mark.parametrize("ext", ["csv", "tsv", "parquet"])
def test_tokens_map_to_items_then_other_entities(tmp_path: Path, ext: str) -> None:
    data = read_plain(plain_dir(tmp_path, ext, INTERACTIONS, TRIPLES))
    assert data.names["items"].rows() == [(0, "song:a"), (1, "song:b")]
    assert data.interactions.select("user", "item").collect().rows() == [(0, 1), (1, 0), (0, 0)]
    entity = {name: i for i, name in data.names["entities"].rows()}
    assert entity == {"song:a": 0, "song:b": 1, "music": 2, "rock": 3}
    assert data.triples.collect().rows() == [(0, 0, 3), (1, 0, 3), (3, 1, 2)]
    assert (data.n_users, data.n_items, data.n_entities, data.n_relations) == (2, 2, 4, 2)


def test_split_column_is_kept(tmp_path: Path) -> None:
    inter = pl.DataFrame({"user": [1, 1, 2, 2], "item": [5, 6, 5, 7], "split": ["train", "test", "train", "valid"]})
    raw = plain_dir(tmp_path / "raw", "csv", inter, pl.DataFrame({"head": [5], "relation": [0], "tail": [9]}))
    ds = KGDataset.open(ingest(raw, tmp_path / "out", progress=False).path)
    assert ds.metadata["split"] == {"method": "given", "drop_unlinked_items": False}
    assert ds.metadata["n_interactions"] == {"train": 2, "valid": 1, "test": 1}
    assert ds.pairs("test").tolist() == [[0, 1]]  # user 1 -> 0; items 5, 6, 7 -> 0, 1, 2


def test_parquet_datetimes_order_the_split(tmp_path: Path) -> None:
    day = dt.datetime(2024, 1, 1)
    inter = pl.DataFrame(
        {"user": ["u"] * 10, "item": [f"i{k}" for k in range(10)], "timestamp": [day + dt.timedelta(days=9 - k) for k in range(10)]}
    )
    raw = plain_dir(tmp_path / "raw", "parquet", inter, pl.DataFrame({"head": ["i0"], "relation": ["r"], "tail": ["x"]}))
    ds = KGDataset.open(ingest(raw, tmp_path / "out", progress=False).path)
    assert ds.metadata["split"]["method"] == "per_user_by_timestamp"
    assert ds.pairs("test").tolist() == [[0, 0]]  # i0 is the newest


def test_bad_split_value_names_the_line(tmp_path: Path) -> None:
    inter = pl.DataFrame({"user": [1, 2], "item": [5, 6], "split": ["train", "dev"]})
    raw = plain_dir(tmp_path, "tsv", inter, TRIPLES)
    with pytest.raises(IngestError) as err:
        read_plain(raw)
    assert err.value.line == 3 and "split 'dev' is not one of train, valid, test" in err.value.reason


def test_parquet_errors_name_the_row(tmp_path: Path) -> None:
    inter = pl.DataFrame({"user": ["a", None, "c"], "item": ["x", "y", "z"]})
    raw = plain_dir(tmp_path, "parquet", inter, TRIPLES)
    with pytest.raises(IngestError, match=r"interactions.parquet: row 2: user is empty"):
        read_plain(raw)


def test_parquet_read_in_small_batches_counts_rows_across_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kg_data.formats import triples as triples_module

    users = [f"u{i % 7}" for i in range(20)]
    inter = pl.DataFrame({"user": users, "item": [f"i{i % 5}" for i in range(20)], "timestamp": [float(i) for i in range(20)]})
    whole = read_plain(plain_dir(tmp_path / "ok", "parquet", inter, TRIPLES))
    monkeypatch.setattr(triples_module, "_PARQUET_BATCH_ROWS", 3)
    batched = read_plain(plain_dir(tmp_path / "ok3", "parquet", inter, TRIPLES))
    assert batched.interactions.collect().equals(whole.interactions.collect())
    bad = inter.with_columns(timestamp=pl.Series([str(float(i)) if i != 16 else "soon" for i in range(20)]))
    with pytest.raises(IngestError, match=r"interactions.parquet: row 17: timestamp 'soon' is not a number"):
        read_plain(plain_dir(tmp_path / "bad", "parquet", bad, TRIPLES))


def test_missing_column_and_missing_table_are_refused(tmp_path: Path) -> None:
    raw = plain_dir(tmp_path / "a", "csv", INTERACTIONS.rename({"item": "thing"}), TRIPLES)
    with pytest.raises(IngestError, match=r"interactions.csv:1: no column 'item'"):
        read_plain(raw)
    raw = plain_dir(tmp_path / "b", "csv", INTERACTIONS, TRIPLES)
    (raw / "triples.csv").unlink()
    with pytest.raises(IngestError, match=r"triples.csv: missing required file"):
        read_plain(raw)


def test_unreadable_parquet_is_refused(tmp_path: Path) -> None:
    raw = plain_dir(tmp_path, "csv", INTERACTIONS, TRIPLES)
    (raw / "triples.csv").unlink()
    (raw / "triples.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(IngestError, match=r"triples.parquet: not a readable Parquet file"):
        read_plain(raw)
