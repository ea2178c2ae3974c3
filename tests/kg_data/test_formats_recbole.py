"""RecBole atomic reader: typed headers, token remapping, item-entity links, timestamp splits."""

from __future__ import annotations

from pathlib import Path

import pytest

from kg_data import KGDataset, ingest
from kg_data.errors import IngestError
from kg_data.formats.recbole import read_recbole

INTER = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
KG = "head_id:token\trelation_id:token\ttail_id:token\n"
LINK = "item_id:token\tentity_id:token\n"


def recbole_dir(root: Path, inter: str, kg: str, link: str | None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "toy.inter").write_text(inter)
    (root / "toy.kg").write_text(kg)
    if link is not None:
        (root / "toy.link").write_text(link)
    return root


def small(root: Path) -> Path:
    inter = INTER + "u7\t20\t5\t300\nu7\t10\t3\t100\nu3\t30\t4\t200\n"
    kg = KG + "m.a\tfilm.genre\tm.drama\nm.b\tfilm.genre\tm.drama\nm.drama\tgenre.parent\tm.art\n"
    link = LINK + "10\tm.a\n30\tm.b\n"
    return recbole_dir(root, inter, kg, link)


def test_tokens_become_dense_ids_and_linked_items_are_their_entities(tmp_path: Path) -> None:
    data = read_recbole(small(tmp_path))
    # users u3 < u7 (lexicographic), items 10 < 20 < 30 (numeric)
    assert data.names["users"].rows() == [(0, "u3"), (1, "u7")]
    assert data.names["items"].rows() == [(0, "10"), (1, "20"), (2, "30")]
    assert data.interactions.select("user", "item").collect().rows() == [(1, 1), (1, 0), (0, 2)]
    # m.a is item 10 (id 0), m.b item 30 (id 2); m.art, m.drama follow after the 3 items
    entity = dict((name, i) for i, name in data.names["entities"].rows())
    assert entity == {"m.a": 0, "m.b": 2, "m.art": 3, "m.drama": 4}
    relation = dict((name, i) for i, name in data.names["relations"].rows())
    assert data.triples.collect().rows() == [
        (0, relation["film.genre"], 4),
        (2, relation["film.genre"], 4),
        (4, relation["genre.parent"], 3),
    ]
    assert (data.n_items, data.n_entities, data.n_relations) == (3, 5, 2)


def test_unlinked_items_stay_items_without_triples(tmp_path: Path) -> None:
    meta = ingest(small(tmp_path / "raw"), tmp_path / "out", progress=False).metadata
    assert meta["n_items_with_triples"] == 2
    assert meta["reported"]["items_without_triples"] == 1  # item "20" has no link
    assert meta["reported"]["interactions_with_items_without_triples"] == 1
    assert meta["n_kg_entities"] == 4


def test_split_follows_timestamps_per_user(tmp_path: Path) -> None:
    rows = "".join(f"u{u}\t{i}\t1\t{1000 - i}\n" for u in range(3) for i in range(10))  # item 0 is the latest
    kg = KG + "".join(f"e{i}\tr\tg{i % 2}\n" for i in range(10))
    link = LINK + "".join(f"{i}\te{i}\n" for i in range(10))
    ds = KGDataset.open(ingest(recbole_dir(tmp_path / "raw", INTER + rows, kg, link), tmp_path / "out", progress=False).path)
    assert ds.metadata["split"]["method"] == "per_user_by_timestamp"
    assert sorted(ds.pairs("test").tolist()) == [[0, 0], [1, 0], [2, 0]]  # each user's newest item
    assert sorted(ds.pairs("valid").tolist()) == [[0, 1], [1, 1], [2, 1]]


def test_file_without_typed_header_is_refused(tmp_path: Path) -> None:
    raw = recbole_dir(tmp_path, "user_id\titem_id\n1\t2\n", KG + "a\tr\tb\n", LINK + "2\ta\n")
    with pytest.raises(IngestError) as err:
        read_recbole(raw)
    assert err.value.line == 1 and "no RecBole typed header" in err.value.reason


def test_header_without_a_required_column_is_refused(tmp_path: Path) -> None:
    raw = recbole_dir(tmp_path, "user_id:token\trating:float\n1\t2\n", KG + "a\tr\tb\n", LINK + "2\ta\n")
    with pytest.raises(IngestError, match="header lacks column 'item_id:token'"):
        read_recbole(raw)


def test_missing_link_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"NAME.link: missing required file"):
        read_recbole(recbole_dir(tmp_path, INTER + "1\t2\t1\t1\n", KG + "a\tr\tb\n", None))


@pytest.mark.parametrize(
    ("inter_rows", "line", "reason"),
    [
        ("1\t2\t1\t5\n\t3\t1\t5\n", 3, "user_id is empty"),
        ("1\t2\t1\t5\n1\t3\t1\tyesterday\n", 3, "timestamp 'yesterday' is not a number"),
        ("1\t2\t1\t5\n1\t3\t1\n", 3, "expected 4 tab-separated fields, found 3"),
    ],
)
def test_bad_rows_name_the_line(tmp_path: Path, inter_rows: str, line: int, reason: str) -> None:
    raw = recbole_dir(tmp_path, INTER + inter_rows, KG + "a\tr\tb\n", LINK + "2\ta\n")
    with pytest.raises(IngestError) as err:
        read_recbole(raw)
    assert err.value.line == line and reason in err.value.reason


def test_conflicting_links_are_refused(tmp_path: Path) -> None:
    raw = recbole_dir(tmp_path, INTER + "1\t2\t1\t5\n", KG + "a\tr\tb\n", LINK + "2\ta\n3\tb\n2\tc\n")
    with pytest.raises(IngestError) as err:
        read_recbole(raw)
    assert err.value.line == 4
    assert "item '2' is linked to 'a' (line 2) and to 'c'" in err.value.reason
