"""kg_data.ingest: the dataset dir contract, format detection, atomic writes and overwrite."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import kg_data
from kg_data import DatasetInfo, KGDataset, ingest
from kg_data.errors import IngestError, KGDataError
from kg_data.formats import detect_format


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


def test_package_attribute_is_the_function_even_after_importing_the_module(tmp_path: Path, tiny_raw_dir: Path) -> None:
    import kg_data.ingest as module  # noqa: F401 - the submodule import must not shadow the function

    assert callable(kg_data.ingest) and kg_data.ingest is ingest
    info = kg_data.ingest(tiny_raw_dir, tmp_path / "out", progress=False)
    assert isinstance(info, DatasetInfo) and info.path == tmp_path / "out"


def test_dataset_dir_follows_the_contract(tmp_path: Path, tiny_raw_dir: Path) -> None:
    # Exactly what ingest writes (other parts may add caches to a dataset dir later, so use a fresh one).
    fresh = ingest(tiny_raw_dir, tmp_path / "fresh", progress=False).path
    names = sorted(p.name for p in fresh.iterdir())
    assert names == sorted(
        ["interactions.parquet", "triples.parquet", "users.parquet", "items.parquet", "entities.parquet", "relations.parquet", "metadata.json"]
    )
    schema = {name: dict(zip(s.names, map(str, s.types), strict=True)) for name, s in ((n, pq.read_schema(fresh / n)) for n in names if n.endswith(".parquet"))}
    assert schema["interactions.parquet"] == {"user": "int32", "item": "int32", "split": "large_string"}
    assert schema["triples.parquet"] == {"head": "int32", "relation": "int32", "tail": "int32"}
    for table in ("users", "items", "entities", "relations"):
        assert schema[f"{table}.parquet"] == {"id": "int32", "name": "large_string"}

    meta = json.loads((fresh / "metadata.json").read_text())
    for key in ("format_version", "source_format", "n_users", "n_items", "n_entities", "n_relations", "n_triples", "n_interactions", "dropped", "split", "sources"):
        assert key in meta
    assert meta["source_format"] == "kgat"
    assert set(meta["n_interactions"]) == {"train", "valid", "test"}
    digest = hashlib.sha256((tiny_raw_dir / "kg_final.txt").read_bytes()).hexdigest()
    assert meta["sources"]["kg_final.txt"]["sha256"] == digest


def test_id_tables_cover_every_id(tiny_dataset_dir: Path) -> None:
    ds = KGDataset.open(tiny_dataset_dir)
    for table, size in ((ds.users(), ds.n_users), (ds.items(), ds.n_items), (ds.entities(), ds.n_entities), (ds.relations(), ds.n_relations)):
        assert table.collect()["id"].to_list() == list(range(size))
    assert ds.items().collect()["name"][5] == "i5"
    triples = ds.triples_array()
    assert triples[:, [0, 2]].max() < ds.n_entities and triples[:, 1].max() < ds.n_relations
    assert ds.pairs()[:, 1].max() < ds.n_items


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (["train.txt", "test.txt", "kg_final.txt"], "kgat"),
        (["ratings_final.txt", "kg_final.txt", "kg.txt"], "kgcn"),
        (["ml.inter", "ml.kg", "ml.link", "ml.item"], "recbole"),
        (["interactions.parquet", "triples.csv"], "triples"),
    ],
)
def test_format_is_detected_from_file_names(tmp_path: Path, files: list[str], expected: str) -> None:
    for name in files:
        (tmp_path / name).write_text("x\n")
    assert detect_format(tmp_path) == expected


def test_detection_refuses_ambiguous_and_unknown_dirs(tmp_path: Path) -> None:
    for name in ("train.txt", "test.txt", "ratings_final.txt"):
        (tmp_path / name).write_text("0 1\n")
    with pytest.raises(IngestError, match="several formats .* pass --format"):
        detect_format(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "kg_final.txt").write_text("0 0 1\n")
    with pytest.raises(IngestError, match="unknown format: found kg_final.txt \\(kg_final.txt alone is not enough"):
        detect_format(other)


def test_forced_format_reads_a_dir_that_detection_finds_ambiguous(tmp_path: Path, tiny_raw_dir: Path) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(tiny_raw_dir, raw)
    (raw / "ratings_final.txt").write_text("0\t1\t1\n")
    with pytest.raises(IngestError, match="several formats"):
        ingest(raw, tmp_path / "auto", progress=False)
    assert ingest(raw, tmp_path / "forced", format="kgat", progress=False).metadata["source_format"] == "kgat"


def test_existing_out_is_refused_then_replaced_with_overwrite(tmp_path: Path, tiny_raw_dir: Path) -> None:
    out = tmp_path / "out"
    ingest(tiny_raw_dir, out, progress=False)
    before = (out / "metadata.json").read_text()
    with pytest.raises(KGDataError, match="already exists; pass --overwrite"):
        ingest(tiny_raw_dir, out, progress=False)
    ingest(tiny_raw_dir, out, overwrite=True, progress=False)
    assert (out / "metadata.json").read_text() == before
    assert leftovers(tmp_path) == []


def test_overwrite_refuses_a_dir_that_ingest_did_not_write(tmp_path: Path, tiny_raw_dir: Path) -> None:
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(KGDataError, match="not a dataset dir written by ingest"):
        ingest(tiny_raw_dir, precious, overwrite=True, progress=False)
    assert (precious / "notes.txt").read_text() == "keep me"


def test_a_failure_while_writing_leaves_nothing_behind(tmp_path: Path, tiny_raw_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import polars as pl

    calls = {"n": 0}
    real = pl.DataFrame.write_parquet

    def fail_on_third(self: pl.DataFrame, *args: object, **kwargs: object) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full")
        real(self, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", fail_on_third)
    with pytest.raises(OSError, match="disk full"):
        ingest(tiny_raw_dir, tmp_path / "data" / "out", progress=False)
    assert not (tmp_path / "data" / "out").exists()
    assert leftovers(tmp_path / "data") == []


def test_a_failed_overwrite_keeps_the_previous_dataset(tmp_path: Path, tiny_raw_dir: Path) -> None:
    out = tmp_path / "out"
    ingest(tiny_raw_dir, out, progress=False)
    before = KGDataset.open(out).fingerprint
    bad = tmp_path / "bad"
    shutil.copytree(tiny_raw_dir, bad)
    (bad / "kg_final.txt").write_text("0 0 1\n0 zero 2\n")
    with pytest.raises(IngestError, match="kg_final.txt:2: relation 'zero'"):
        ingest(bad, out, overwrite=True, progress=False)
    assert KGDataset.open(out).fingerprint == before
    assert leftovers(tmp_path) == []


def test_progress_bar_goes_to_stderr(tmp_path: Path, tiny_raw_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ingest(tiny_raw_dir, tmp_path / "out", progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "ingest" in captured.err


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "csv"}, "unknown format 'csv'"),
        ({"split_ratios": (0.9, 0.2, 0.0)}, "split ratios need to sum to 1"),
        ({"split": "sideways"}, "split method 'sideways' is unknown; choose one of auto, random, time"),
        ({"split": (0.8, 0.1, 0.1)}, "give the shares as split ratios"),
        ({"split_rounding": "up"}, "split rounding 'up' is unknown; choose half-up"),
        ({"drop_unlinked_items": "yes"}, "'drop_unlinked_items' needs to be True or False"),
    ],
)
def test_bad_arguments_are_refused_before_reading(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(KGDataError, match=message):
        ingest(tmp_path / "does-not-matter", tmp_path / "out", progress=False, **kwargs)
