"""KGAT reader: the quirks of published files are handled deliberately and counted."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kg_data import ingest
from kg_data.errors import IngestError
from kg_data.formats.kgat import read_kgat, read_list_file


def kgat_dir(root: Path, **files: str) -> Path:
    """A KGAT dir with small defaults; keyword `train_txt="..."` writes train.txt, None leaves it out."""
    defaults = {
        "train.txt": "0 0 1\n1 1 2\n",
        "test.txt": "0 2\n1 0\n",
        "kg_final.txt": "0 0 3\n1 1 3\n2 0 4\n",
    }
    defaults.update({name.replace("_txt", ".txt"): text for name, text in files.items()})
    root.mkdir(parents=True, exist_ok=True)
    for name, text in defaults.items():
        if text is not None:
            (root / name).write_bytes(text.encode())
    return root


def test_minimal_dir_reads_with_given_splits(tmp_path: Path) -> None:
    data = read_kgat(kgat_dir(tmp_path))
    assert data.has_splits
    assert data.interactions.select("user", "item", "split").collect().rows() == [
        (0, 0, 0), (0, 1, 0), (1, 1, 0), (1, 2, 0), (0, 2, 2), (1, 0, 2),  # split codes: 0 train, 2 test
    ]
    assert data.triples.collect().rows() == [(0, 0, 3), (1, 1, 3), (2, 0, 4)]


def test_published_quirks_are_accepted_and_counted(tmp_path: Path) -> None:
    raw = kgat_dir(
        tmp_path / "raw",
        train_txt="0 0 1 1 \r\n1 1 2\r\n2\r\n",  # trailing space, duplicated item, user alone, CRLF
        valid_txt="0 3\r\n1\r\n2\r\n",
        test_txt="0 2\r\n1 0\r\n2 2 \r\n",
        kg_final_txt="0 0 3\r\n0 0 3\r\n1 1 3\r\n2 0 9\r\n",  # a duplicated triple; entity 9 beyond the list
        entity_list_txt="org_id remap_id\r\n" + "".join(f"m.{i} {i}\r\n" for i in range(6)),
        item_list_txt="org_id remap_id freebase_id\r\n10 0 m.0\r\n11 1\r\n12 2 m.2\r\n13 3 m.3\r\n",  # a missing field
    )
    info = ingest(raw, tmp_path / "out", progress=False)
    meta = info.metadata
    assert meta["dropped"]["duplicate_interactions"] == 1
    assert meta["dropped"]["duplicate_triples"] == 1
    assert meta["reported"]["user_lines_without_items"] == 3
    assert meta["reported"]["entity_ids_beyond_entity_list"] == 1
    assert meta["reported"]["list_rows_with_missing_fields"] == 1
    assert meta["n_entities"] == 10  # sized by the larger of entity_list (6) and the ids seen (max 9)
    assert meta["n_items"] == 4  # item_list has 4 rows, interactions reach item 3
    assert meta["n_users"] == 3  # user 2 has no items in train, but is a user
    assert meta["n_interactions"] == {"train": 4, "valid": 1, "test": 3}


def test_pair_in_two_splits_is_kept_in_the_earliest(tmp_path: Path) -> None:
    raw = kgat_dir(tmp_path / "raw", test_txt="0 1 2\n1 0\n")  # (0, 1) is also in train
    meta = ingest(raw, tmp_path / "out", progress=False).metadata
    assert meta["dropped"]["interactions_repeated_across_splits"] == 1
    assert meta["n_interactions"] == {"train": 4, "valid": 0, "test": 2}


def test_list_files_name_the_ids(tmp_path: Path) -> None:
    raw = kgat_dir(
        tmp_path,
        user_list_txt="org_id remap_id\nalice 0\nbob 1\n",
        relation_list_txt="org_id remap_id\nhttp://x/genre 0\nhttp://x/artist 1\n",
    )
    data = read_kgat(raw)
    assert data.names["users"].rows() == [(0, "alice"), (1, "bob")]
    assert data.names["relations"].rows() == [(0, "http://x/genre"), (1, "http://x/artist")]


def test_list_file_quirks_take_the_careful_path(tmp_path: Path) -> None:
    path = tmp_path / "item_list.txt"
    path.write_text("org_id remap_id freebase_id\n10  0 m.0 \n11 1\n")
    names, short = read_list_file(path)
    assert names.rows() == [(0, "10"), (1, "11")]
    assert short == 1


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("m.0 0\nm.1 1\n", 1, "expected a header line like 'org_id remap_id'"),
        ("org_id remap_id\nm.0 0\nm.1 0\n", 3, "remap_id 0 already given on line 2"),
        ("org_id remap_id\nm.0 zero\n", 2, "remap_id missing or not a non-negative integer"),
        ("org_id remap_id\nm.0 0 extra\n", 2, "expected at most 2 fields"),
    ],
)
def test_bad_list_files_name_the_line(tmp_path: Path, text: str, line: int, reason: str) -> None:
    path = tmp_path / "entity_list.txt"
    path.write_text(text)
    with pytest.raises(IngestError) as err:
        read_list_file(path)
    assert err.value.line == line
    assert reason in err.value.reason


def test_missing_kg_final_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"kg_final.txt: missing required file \(a KGAT dir needs"):
        read_kgat(kgat_dir(tmp_path, kg_final_txt=None))


def test_bad_interaction_token_names_file_and_line(tmp_path: Path) -> None:
    raw = kgat_dir(tmp_path, test_txt="0 2\n\n1 -7\n")
    with pytest.raises(IngestError) as err:
        read_kgat(raw)
    assert str(err.value).startswith(f"{raw / 'test.txt'}:3: item (field 2) is negative (-7)")


def test_synthetic_dir_round_trips(tiny_raw_dir: Path) -> None:
    data = read_kgat(tiny_raw_dir)
    lines = (tiny_raw_dir / "train.txt").read_text().splitlines()
    expected = sum(len(line.split()) - 1 for line in lines)
    assert data.interactions.filter(pl.col("split") == 0).collect().height == expected
    assert data.triples.collect().height == len((tiny_raw_dir / "kg_final.txt").read_text().splitlines())
    assert data.n_entities == 900 and data.n_items == 300 and data.n_relations == 6
