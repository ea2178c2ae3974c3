"""Token -> dense id mapping: natural order, independent of row order, items first among entities."""

from __future__ import annotations

import polars as pl

from kg_data.formats._tokens import dense_ids, entity_ids, to_ids


def test_integer_tokens_sort_numerically_others_lexicographically() -> None:
    assert dense_ids(pl.Series(["10", "9", "100", "9"])).rows() == [("9", 0), ("10", 1), ("100", 2)]
    assert dense_ids(pl.Series(["b", "a10", "a9", None])).rows() == [("a10", 0), ("a9", 1), ("b", 2)]
    assert dense_ids(pl.Series(["x", "y"]), offset=5)["id"].to_list() == [5, 6]


def test_ids_do_not_depend_on_row_order() -> None:
    tokens = pl.Series([f"t{i}" for i in range(50)])
    assert dense_ids(tokens).equals(dense_ids(tokens.shuffle(seed=1)))


def test_to_ids_replaces_the_column_in_place() -> None:
    frame = pl.DataFrame({"user": ["b", "a", "b"], "n": [1, 2, 3]})
    mapped = to_ids(frame, "user", dense_ids(frame["user"]))
    assert mapped.rows() == [(1, 1), (0, 2), (1, 3)]
    assert mapped.columns == ["user", "n"]


def test_entities_that_are_items_keep_the_item_ids() -> None:
    items = pl.DataFrame({"token": ["song:a", "song:b"], "id": [0, 1]})
    ids = entity_ids(pl.Series(["rock", "song:b", "jazz", "rock"]), items, n_items=2)
    assert dict(ids.iter_rows()) == {"song:a": 0, "song:b": 1, "jazz": 2, "rock": 3}
