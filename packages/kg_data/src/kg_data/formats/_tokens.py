"""String tokens -> dense integer ids, for formats whose files name things (RecBole, plain tables).

Ids follow the tokens' natural order: numeric when every token is an integer (so `1..943` become
`0..942`, and ids that are already dense stay as they are), lexicographic otherwise. The order does
not depend on the order of rows in the file, so re-ordering a file does not renumber anything.
"""

from __future__ import annotations

from typing import TypeVar

import polars as pl

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)


def dense_ids(tokens: pl.Series, offset: int = 0) -> pl.DataFrame:
    """(`token` String, `id` Int64) for the distinct non-null tokens, ids `offset, offset+1, ...`."""
    unique = tokens.cast(pl.String).drop_nulls().unique()
    as_int = unique.cast(pl.Int64, strict=False)
    key = as_int if as_int.null_count() == 0 else unique
    return (
        pl.DataFrame({"token": unique, "_key": key})
        .sort("_key", "token")
        .with_row_index("id", offset=offset)
        .select("token", pl.col("id").cast(pl.Int64))
    )


def distinct_tokens(frame: pl.LazyFrame, column: str) -> pl.Series:
    """The distinct non-null tokens of a column (a streaming `unique`: memory grows with the number of
    distinct tokens, the size of the id map, not with the rows)."""
    return frame.select(pl.col(column).cast(pl.String)).drop_nulls().unique().collect(engine="streaming")[column]


def to_ids(frame: FrameT, column: str, ids: pl.DataFrame) -> FrameT:
    """`frame` with its token column `column` replaced, in place, by the tokens' ids (null if unknown).
    Works on a lazy frame too: the id map is the join's build side, the rows stream past it."""
    mapping = ids.select(_token="token", _id="id")
    if isinstance(frame, pl.LazyFrame):
        mapping = mapping.lazy()
    return (
        frame.with_columns(_token=pl.col(column).cast(pl.String))
        .join(mapping, on="_token", how="left", maintain_order="left")
        .with_columns(pl.col("_id").alias(column))
        .drop("_token", "_id")
    )


def entity_ids(
    entity_tokens: pl.Series, item_of_entity: pl.DataFrame, n_items: int
) -> pl.DataFrame:
    """(`token`, `id`) for KG entities: an entity that is an item takes the item's id; the others
    follow after the items (`n_items, n_items+1, ...`) in token order.

    `item_of_entity`: (`token` entity token, `id` item id) for the entities that are items.
    """
    distinct = entity_tokens.cast(pl.String).drop_nulls().unique()
    others = distinct.filter(~distinct.is_in(item_of_entity["token"].implode()))
    return pl.concat([item_of_entity.select("token", "id"), dense_ids(others, offset=n_items)])
