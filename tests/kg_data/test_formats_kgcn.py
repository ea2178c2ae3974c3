"""KGCN reader: sampled negatives are dropped and counted, labels are checked, splits are made."""

from __future__ import annotations

from pathlib import Path

import pytest

from kg_data import KGDataset, ingest
from kg_data.errors import IngestError
from kg_data.formats.kgcn import read_kgcn


def kgcn_dir(root: Path, ratings: str, kg: str = "0\t0\t5\n1\t1\t5\n2\t0\t6\n", **extra: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "ratings_final.txt").write_text(ratings)
    if kg is not None:
        (root / "kg_final.txt").write_text(kg)
    for name, text in extra.items():
        (root / name).write_text(text)
    return root


def test_negatives_are_dropped_and_counted(tmp_path: Path) -> None:
    data = read_kgcn(kgcn_dir(tmp_path, "0\t1\t1\n0\t2\t0\n1\t0\t1\n1\t3\t0\n"))
    assert data.interactions.select("user", "item").collect().rows() == [(0, 1), (1, 0)]
    assert data.dropped == {"negative_samples": 2}
    assert data.n_items == 4  # item 3 is seen only in a negative, but KGCN numbered it
    assert not data.has_splits


def test_item_names_come_from_the_item_map(tmp_path: Path) -> None:
    raw = kgcn_dir(tmp_path, "0 0 1\n0 1 1\n", **{"item_index2entity_id.txt": "0002005018\t0\n0060973129\t1\n"})
    data = read_kgcn(raw)
    assert sorted(data.names["items"].rows()) == [(0, "0002005018"), (1, "0060973129")]


@pytest.mark.parametrize(("label", "shown"), [("2", "label 2 is not 0 or 1"), ("-1", "label is negative")])
def test_bad_label_names_the_line(tmp_path: Path, label: str, shown: str) -> None:
    raw = kgcn_dir(tmp_path, f"0\t1\t1\n0\t2\t0\n0\t3\t{label}\n")
    with pytest.raises(IngestError) as err:
        read_kgcn(raw)
    assert err.value.line == 3 and shown in err.value.reason


def test_missing_kg_final_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"kg_final.txt: missing required file \(a KGCN dir needs"):
        read_kgcn(kgcn_dir(tmp_path, "0\t1\t1\n", kg=None))


def test_random_split_is_per_user_and_deterministic_by_seed(tmp_path: Path) -> None:
    rows = "".join(f"{u}\t{i}\t1\n" for u in range(30) for i in range(20))
    raw = kgcn_dir(tmp_path / "raw", rows, kg="".join(f"{i}\t0\t{20 + i % 3}\n" for i in range(20)))
    first = KGDataset.open(ingest(raw, tmp_path / "a", seed=1, progress=False).path)
    again = KGDataset.open(ingest(raw, tmp_path / "b", seed=1, progress=False).path)
    other = KGDataset.open(ingest(raw, tmp_path / "c", seed=2, progress=False).path)
    assert first.metadata["split"]["method"] == "per_user_random"
    assert first.metadata["n_interactions"] == {"train": 480, "valid": 60, "test": 60}
    per_user = first.interactions("test").collect().group_by("user").len()
    assert per_user["len"].to_list() == [2] * 30  # 10% of each user's 20 items
    assert (first.pairs("test") == again.pairs("test")).all()
    assert first.fingerprint == again.fingerprint
    assert sorted(map(tuple, first.pairs("test"))) != sorted(map(tuple, other.pairs("test")))
