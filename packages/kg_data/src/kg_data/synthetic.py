"""A realistic synthetic KG-recommendation dataset, written as raw KGAT files.

Why not uniform random data: a recommender trained on it can learn nothing, and a KG-aware model
cannot beat a plain one. Here users and items belong to latent *tastes*; users mostly pick items of
their own taste, and items of one taste share KG tails (genre-, artist-like entities), so the KG
carries real signal about what a user will like. Degrees follow power laws like real logs do: a few
users and items are very active, most are not.

Everything is vectorized numpy and Polars (100k users take a few seconds). The files are what
`kg_data.formats.kgat` reads: `train.txt`/`valid.txt`/`test.txt` (`user item item ...`, a user with no
items in a split stands alone on its line, as in published KGAT data), `kg_final.txt` (`head relation
tail`) and the four `*_list.txt` files with their header lines.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from kg_data.errors import KGDataError

#: Share of a user's interactions drawn from their own taste (the rest follow global popularity).
TASTE_AFFINITY = 0.8
#: Share of an item's taste-linked triples whose tail comes from its own taste's tails.
KG_AFFINITY = 0.85
#: Share of interactions in valid and test, per user (rounded half up; the rest is train).
VALID_SHARE = 0.1
TEST_SHARE = 0.1


def write_synthetic_kgat(
    raw_dir: str | Path,
    *,
    n_users: int,
    n_items: int,
    n_extra_entities: int,
    n_relations: int,
    mean_user_degree: float,
    seed: int,
) -> Path:
    """Write a raw KGAT-format dataset into `raw_dir` (created if needed) and return its path.

    Entities `0..n_items-1` are the items, `n_items..n_items+n_extra_entities-1` the other entities.
    Relation `n_relations-1` links extra entities to extra entities (a second hop) when there are at
    least 3 relations; the others link items to tail entities that depend on the item's taste.
    """
    _check_sizes(n_users, n_items, n_extra_entities, n_relations, mean_user_degree)
    rng = np.random.default_rng(seed)
    out = Path(raw_dir)
    out.mkdir(parents=True, exist_ok=True)

    n_tastes = int(np.clip(round(np.sqrt(n_items) / 2), 2, 64))
    item_taste = rng.integers(0, n_tastes, n_items)
    item_weight = _zipf_weights(n_items, 0.9, rng)
    users, items = _interactions(rng, n_users, n_items, n_tastes, item_taste, item_weight, mean_user_degree)
    split = _split_per_user(rng, users)
    triples = _knowledge_graph(rng, n_items, n_extra_entities, n_relations, n_tastes, item_taste, item_weight)

    for code, name in enumerate(("train", "valid", "test")):
        mask = split == code
        _write_kgat_lines(out / f"{name}.txt", n_users, users[mask], items[mask])
    pl.DataFrame({"h": triples[:, 0], "r": triples[:, 1], "t": triples[:, 2]}).write_csv(
        out / "kg_final.txt", separator=" ", include_header=False
    )
    _write_lists(out, n_users, n_items, n_items + n_extra_entities, n_relations)
    return out


def _check_sizes(n_users: int, n_items: int, n_extra: int, n_relations: int, degree: float) -> None:
    problems = [
        f"'{name}' needs to be at least {low} (got {value})"
        for name, value, low in (
            ("n_users", n_users, 1),
            ("n_items", n_items, 2),
            ("n_extra_entities", n_extra, 1),
            ("n_relations", n_relations, 1),
        )
        if value < low
    ]
    if not degree > 0:
        problems.append(f"'mean_user_degree' needs to be positive (got {degree})")
    elif degree > n_items / 2:
        problems.append(f"'mean_user_degree' needs to be at most n_items / 2 = {n_items / 2:g} (got {degree})")
    if problems:
        raise KGDataError("write_synthetic_kgat: " + "; ".join(problems))


def _zipf_weights(n: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """Power-law popularity weights in a random order (the most popular thing is not always id 0)."""
    weights = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return rng.permutation(weights)


def _user_degrees(rng: np.random.Generator, n_users: int, mean: float, cap: int) -> np.ndarray:
    """1 + scaled Lomax(shape 1.6) degrees: most users have a few items, a heavy tail has many
    (shape < 2: infinite variance, finite mean, like real activity logs). The scale is tuned on the
    drawn sample so that the mean after flooring and capping is the one asked for."""
    lomax = rng.pareto(1.6, n_users)
    scale = (mean - 1) / max(lomax.mean(), 1e-12)
    for _ in range(20):
        degrees = np.minimum(1 + np.floor(lomax * scale).astype(np.int64), cap)
        if abs(degrees.mean() - mean) < 0.01 or degrees.mean() <= 1:
            break
        scale *= (mean - 1) / max(degrees.mean() - 1, 1e-12)
    return degrees


def _sample_from_segments(
    rng: np.random.Generator, cumulative: np.ndarray, start: np.ndarray, stop: np.ndarray
) -> np.ndarray:
    """For each draw, an index in [start, stop) picked with the weights whose running sum is `cumulative`."""
    low = np.where(start > 0, cumulative[np.maximum(start - 1, 0)], 0.0)
    target = low + rng.random(len(start)) * (cumulative[stop - 1] - low)
    picked = np.searchsorted(cumulative, target, side="right")
    return np.clip(picked, start, stop - 1)


def _interactions(
    rng: np.random.Generator,
    n_users: int,
    n_items: int,
    n_tastes: int,
    item_taste: np.ndarray,
    item_weight: np.ndarray,
    mean_degree: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (user, item) pairs, sorted: mostly popular items of the user's taste, some global picks.

    Popular items are drawn again and again, so each round oversamples, drops repeats and keeps up
    to the degree each user still lacks; a few rounds reach the drawn degrees (the mean asked for).
    """
    user_taste = rng.integers(0, n_tastes, n_users)
    missing = _user_degrees(rng, n_users, mean_degree, cap=max(1, n_items // 2))
    order = np.argsort(item_taste, kind="stable")  # items grouped by taste
    cumulative = np.cumsum(item_weight[order])
    bounds = np.searchsorted(item_taste[order], np.arange(n_tastes + 1))

    keys = np.empty(0, dtype=np.int64)  # user * n_items + item
    for _ in range(8):
        short = np.flatnonzero(missing)
        if len(short) == 0:
            break
        users = np.repeat(short, 2 * missing[short])
        taste = user_taste[users]
        start, stop = bounds[taste], bounds[taste + 1]
        own = (rng.random(len(users)) < TASTE_AFFINITY) & (start < stop)
        picked = _sample_from_segments(rng, cumulative, np.where(own, start, 0), np.where(own, stop, n_items))
        drawn = users * n_items + order[picked]
        fresh = drawn[_first_occurrences(drawn)]
        fresh = fresh[~_sorted_contains(keys, fresh)]
        owner = fresh // n_items
        by_owner = np.argsort(owner, kind="stable")
        starts = np.searchsorted(owner[by_owner], owner[by_owner])
        rank = np.empty(len(fresh), dtype=np.int64)
        rank[by_owner] = np.arange(len(fresh)) - starts
        kept = fresh[rank < missing[owner]]
        keys = np.sort(np.concatenate([keys, kept]))
        missing -= np.bincount(kept // n_items, minlength=n_users)
    return keys // n_items, keys % n_items


def _first_occurrences(values: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct value, in their original order (sort based:
    numpy's hash-based unique is far slower on millions of int64 keys)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = np.ones(len(values), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return np.sort(order[first])


def _sorted_contains(sorted_keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`values` found in the sorted array `sorted_keys`."""
    if len(sorted_keys) == 0:
        return np.zeros(len(values), dtype=bool)
    position = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return sorted_keys[position] == values


def _split_per_user(rng: np.random.Generator, users: np.ndarray) -> np.ndarray:
    """0/1/2 = train/valid/test per interaction: a random share of each user's items (users sorted)."""
    key = rng.random(len(users))
    order = np.lexsort((key, users))
    counts = np.bincount(users)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sorted_users = users[order]
    position = np.arange(len(users)) - starts[sorted_users]
    n = counts[sorted_users]
    n_test = np.floor(n * TEST_SHARE + 0.5).astype(np.int64)
    n_valid = np.floor(n * VALID_SHARE + 0.5).astype(np.int64)
    n_train = np.maximum(n - n_test - n_valid, 1)  # every user keeps one training item
    n_valid = np.minimum(n_valid, n - n_train)
    code_sorted = np.where(position < n_train, 0, np.where(position < n_train + n_valid, 1, 2))
    split = np.empty(len(users), dtype=np.int8)
    split[order] = code_sorted
    return split


def _knowledge_graph(
    rng: np.random.Generator,
    n_items: int,
    n_extra: int,
    n_relations: int,
    n_tastes: int,
    item_taste: np.ndarray,
    item_weight: np.ndarray,
) -> np.ndarray:
    """(head, relation, tail) rows, deduplicated, in a shuffled order like published files."""
    hop_relation = n_relations - 1 if n_relations >= 3 else None
    item_relations = [r for r in range(n_relations) if r != hop_relation]
    extra_ids = n_items + np.arange(n_extra)
    pools = np.array_split(extra_ids, len(item_relations))  # each relation has its own tail entities
    parts = []
    for relation, pool in zip(item_relations, pools, strict=True):
        if len(pool) == 0:
            pool = extra_ids
        # Popular items get more facts of a relation (1 + Poisson), as in real KGs.
        per_item = 1 + rng.poisson(item_weight / item_weight.mean())
        heads = np.repeat(np.arange(n_items), per_item)
        pool_taste = np.arange(len(pool)) % n_tastes  # tail k belongs to taste k mod n_tastes
        tails = _taste_tails(rng, pool, pool_taste, item_taste[heads], n_tastes)
        parts.append(np.stack([heads, np.full_like(heads, relation), tails], axis=1))
    if hop_relation is not None and n_extra > 1:
        heads = rng.choice(extra_ids, size=n_extra, replace=True)
        tails = rng.choice(extra_ids, size=n_extra, replace=True)
        keep = heads != tails
        parts.append(np.stack([heads[keep], np.full(keep.sum(), hop_relation), tails[keep]], axis=1))
    triples = np.concatenate(parts).astype(np.int64)
    packed = (triples[:, 0] * n_relations + triples[:, 1]) * (n_items + n_extra) + triples[:, 2]
    triples = triples[_first_occurrences(packed)]
    return triples[rng.permutation(len(triples))]


def _taste_tails(
    rng: np.random.Generator, pool: np.ndarray, pool_taste: np.ndarray, head_taste: np.ndarray, n_tastes: int
) -> np.ndarray:
    """A tail per head: usually one of the head's taste's tails (Zipf-weighted), else any tail."""
    order = np.argsort(pool_taste, kind="stable")
    weights = _zipf_weights(len(pool), 1.0, rng)[order]
    cumulative = np.cumsum(weights)
    bounds = np.searchsorted(pool_taste[order], np.arange(n_tastes + 1))
    start, stop = bounds[head_taste], bounds[head_taste + 1]
    own = (rng.random(len(head_taste)) < KG_AFFINITY) & (start < stop)
    start = np.where(own, start, 0)
    stop = np.where(own, stop, len(pool))
    return pool[order[_sample_from_segments(rng, cumulative, start, stop)]]


def _write_kgat_lines(path: Path, n_users: int, users: np.ndarray, items: np.ndarray) -> None:
    """One line per user, `user item item ...`; a user with no items here stands alone on the line."""
    per_user = (
        pl.DataFrame({"user": users, "item": items})
        .group_by("user")
        .agg(pl.col("item").sort().cast(pl.String).str.join(" ").alias("items"))
    )
    lines = (
        pl.DataFrame({"user": np.arange(n_users, dtype=np.int64)})
        .join(per_user, on="user", how="left")
        .select(
            pl.when(pl.col("items").is_null())
            .then(pl.col("user").cast(pl.String))
            .otherwise(pl.concat_str([pl.col("user").cast(pl.String), pl.col("items")], separator=" "))
            .alias("line")
        )
    )
    lines.write_csv(path, include_header=False, quote_style="never")


def _write_lists(out: Path, n_users: int, n_items: int, n_entities: int, n_relations: int) -> None:
    """The `*_list.txt` files: a header line, then `org_id remap_id [freebase_id]` rows."""
    def write(name: str, header: str, columns: dict[str, pl.Expr]) -> None:
        n = {"user": n_users, "item": n_items, "entity": n_entities, "relation": n_relations}[name]
        frame = pl.DataFrame({"remap_id": np.arange(n, dtype=np.int64)}).select(
            pl.concat_str(list(columns.values()), separator=" ").alias(header)
        )
        frame.write_csv(out / f"{name}_list.txt", quote_style="never")

    rid = pl.col("remap_id").cast(pl.String)
    write("user", "org_id remap_id", {"org": pl.lit("u") + rid, "id": rid})
    write("item", "org_id remap_id freebase_id", {"org": pl.lit("i") + rid, "id": rid, "fb": pl.lit("m.s") + rid})
    entity_name = pl.when(pl.col("remap_id") < n_items).then(pl.lit("m.s") + rid).otherwise(pl.lit("m.e") + rid)
    write("entity", "org_id remap_id", {"org": entity_name, "id": rid})
    write("relation", "org_id remap_id", {"org": pl.lit("synthetic.relation_") + rid, "id": rid})
