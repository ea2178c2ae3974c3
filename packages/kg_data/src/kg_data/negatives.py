"""Negative sampling that never returns a positive: BPR items and corrupted KG tails.

Both are uniform draws from a candidate range minus a per-group excluded set (a user's training
items; the true tails of a (head, relation)). `ExcludingSampler` draws once from the whole range and
keeps the draws that are allowed (one binary search over the sorted excluded keys); the rejected
ones get an exact second draw: a rank `r` among the allowed values, turned into the `r`-th allowed
value with one more binary search. So there is exactly one rejection round, however dense a user
is, and the only failure is a group with nothing allowed, reported by name.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from kg_data.errors import KGDataError
from kg_data.index_dtype import narrow_index, narrowest_index_dtype, search_sorted
from kg_data.unique import sorted_unique, sorted_unique_inverse, unique_of_sorted

_MAX_KEY = np.iinfo(np.int64).max


class ExcludingSampler:
    """Uniform draws from `{0, ..., universe - 1}` minus the values excluded for the draw's group.

    Built from `(group, value)` pairs (duplicates allowed); groups and values are non-negative ints,
    values below `width`. Keys are `group * width + value`, sorted. For the exact draw, the `j`-th
    excluded value `x_j` of a group is also stored as `group * width + (x_j - j)`: `x_j - j` counts
    the allowed values below `x_j`, so the allowed value of rank `r` is `r` plus the number of
    those keys of its group that are at most `group * width + r`. Keys that do not fit int32 are
    kept as their values alone and searched within their group's slice (the same positions).
    """

    def __init__(
        self, groups: np.ndarray, values: np.ndarray, width: int, segmented: bool | None = None
    ) -> None:
        """`segmented`: keep the keys' values only and search each group's slice (None: when the
        keys do not fit int32)."""
        groups = np.asarray(groups, np.int64)
        values = np.asarray(values, np.int64)
        if groups.size and int(groups.max()) > (_MAX_KEY - width) // max(width, 1):
            raise KGDataError(
                f"too many groups ({int(groups.max()) + 1}) for values below {width}: keys would overflow int64"
            )
        self.width = width
        keys = sorted_unique(groups * width + values)
        group_ids, group_start = unique_of_sorted(keys // width)
        bounds = np.append(group_start, len(keys))  # group i's keys: bounds[i] .. bounds[i+1]
        ranks = np.arange(len(keys), dtype=np.int64) - np.repeat(group_start, np.diff(bounds))
        # held for the whole run: each in the narrowest dtype of its own values (see index_dtype)
        self._group_ids, self._bounds = narrow_index(group_ids), narrow_index(bounds)
        # Keys past int32 (many groups times a wide range: 38 MiB a copy at 5M training pairs of
        # 250,000 users and items) are kept as their values alone, in int32, and searched within
        # their group's slice (`segmented_search`): the same positions, so the same draws.
        self._segmented = narrowest_index_dtype(int(keys.max(initial=0))) is np.int64
        if segmented is not None:
            self._segmented = bool(segmented)
        if self._segmented:
            keys = keys % width
        self._keys, self._rank_keys = narrow_index(keys), narrow_index(keys - ranks)

    def _segments(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index of the group's first key, or where it would be; number of excluded values) of each group."""
        at = search_sorted(self._group_ids, groups)
        starts = self._bounds[at].astype(np.int64)
        if not len(self._group_ids):
            return starts, np.zeros(len(groups), np.int64)
        last = np.minimum(at, len(self._group_ids) - 1)
        ends = self._bounds[last + 1].astype(np.int64)
        return starts, np.where(self._group_ids[last] == groups, ends - starts, 0)

    def excluded_count(self, groups: np.ndarray) -> np.ndarray:
        """How many values each group excludes."""
        return self._segments(np.asarray(groups, np.int64))[1]

    def _rank_search(
        self, groups: np.ndarray, ranks: np.ndarray, first: np.ndarray, excluded: np.ndarray
    ) -> np.ndarray:
        """How many of each group's rank keys are at most its rank (`draw`'s second search)."""
        if self._segmented:
            ends = first + excluded
            return segmented_search(self._rank_keys, first, ends, ranks, side="right") - first
        return search_sorted(self._rank_keys, groups * self.width + ranks, side="right") - first

    def is_excluded(self, groups: np.ndarray, values: np.ndarray) -> np.ndarray:
        groups, values = np.asarray(groups, np.int64), np.asarray(values, np.int64)
        if not len(self._keys):
            return np.zeros(len(groups), dtype=bool)
        last = len(self._keys) - 1
        if self._segmented:
            starts, counts = self._segments(groups)
            at = segmented_search(self._keys, starts, starts + counts, values)
            return (at < starts + counts) & (self._keys[np.minimum(at, last)] == values)
        keys = groups * self.width + values
        return self._keys[np.minimum(search_sorted(self._keys, keys), last)] == keys

    def draw(
        self,
        groups: np.ndarray,
        universe: np.ndarray | int,
        rng: np.random.Generator,
        describe: Callable[[int], str] = "group {}".format,
    ) -> np.ndarray:
        """One allowed value per entry of `groups`, uniform over its allowed set.

        Raises `KGDataError` naming the first group (through `describe`) whose allowed set is empty.
        """
        groups = np.asarray(groups, np.int64)
        universe = np.broadcast_to(np.asarray(universe, np.int64), groups.shape)
        if np.any(universe <= 0):
            raise KGDataError(
                f"{describe(int(groups[np.flatnonzero(universe <= 0)[0]]))}: no negative exists for it (no candidates)"
            )
        values = _uniform_below(universe, rng)
        redo = np.flatnonzero(
            self.is_excluded(groups, values)
        )  # a group with nothing allowed always lands here
        first, excluded = self._segments(groups[redo])
        allowed = universe[redo] - excluded
        if np.any(allowed <= 0):
            bad = groups[redo][np.flatnonzero(allowed <= 0)[0]]
            raise KGDataError(
                f"{describe(int(bad))}: no negative exists for it; drop it from the data"
            )
        ranks = _uniform_below(allowed, rng)
        values[redo] = ranks + self._rank_search(groups[redo], ranks, first, excluded)
        return values

    def value_at_rank(self, groups: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """The allowed value of rank `ranks[i]` (0-based, in increasing order) of group `groups[i]`."""
        groups, ranks = np.asarray(groups, np.int64), np.asarray(ranks, np.int64)
        first, excluded = self._segments(groups)
        return ranks + self._rank_search(groups, ranks, first, excluded)


def segmented_search(
    values: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    queries: np.ndarray,
    side: str = "left",
) -> np.ndarray:
    """Per query, where `queries[i]` goes in the sorted slice `values[starts[i]:ends[i]]` (an index
    into `values`, as `np.searchsorted` on that slice plus `starts[i]`): a binary search of every
    query at once, one step per halving of the longest slice."""
    low = np.asarray(starts, np.int64).copy()
    high = np.asarray(ends, np.int64).copy()
    if not len(values):
        return low
    last = len(values) - 1
    active = low < high
    while active.any():
        middle = (low + high) >> 1
        probe = values[np.minimum(middle, last)]
        right = (probe < queries) if side == "left" else (probe <= queries)
        low = np.where(active & right, middle + 1, low)
        high = np.where(active & ~right, middle, high)
        active = low < high
    return low


def _uniform_below(bounds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniform integer in [0, bound) per bound (all bounds >= 1)."""
    return np.minimum((rng.random(len(bounds)) * bounds).astype(np.int64), bounds - 1)


class BPRNegativeSampler:
    """For each user, an item drawn uniformly from the items that are not one of its training positives."""

    def __init__(self, train_pairs: np.ndarray, n_items: int, seed: int = 0) -> None:
        pairs = _as_pairs(train_pairs, "train_pairs")
        if pairs.size and (pairs.min() < 0 or pairs[:, 1].max() >= n_items):
            raise KGDataError(
                f"'train_pairs' holds ids outside users >= 0 and items 0..{n_items - 1}"
            )
        self.n_items = int(n_items)
        self.rng = np.random.default_rng(seed)
        self._excluding = ExcludingSampler(pairs[:, 0], pairs[:, 1], max(self.n_items, 1))

    @classmethod
    def from_dataset(cls, dataset: str | os.PathLike, seed: int = 0) -> BPRNegativeSampler:
        from kg_data.graph import open_dataset

        ds = open_dataset(dataset)
        return cls(ds.pairs("train"), ds.n_items, seed)

    def sample(self, users: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        """One negative item per entry of `users` (int64); `rng` overrides the sampler's own generator."""
        users = np.asarray(users, np.int64)
        rng = self.rng if rng is None else rng
        return self._excluding.draw(
            users, self.n_items, rng, "user {} has every item as a training positive".format
        )


class KGNegativeSampler:
    """Corrupted tails: for (h, r), a tail t' with (h, r, t') not in the KG, drawn from r's observed tails.

    Constraint-based: the candidates are the tails relation `r` has anywhere in the KG (its range), so a
    negative is type-plausible. Where (h, r) already links to every tail of that range, or `r` has
    none, the tail is drawn from all entities instead (still never a true triple).
    """

    def __init__(self, triples: np.ndarray, n_entities: int, seed: int = 0) -> None:
        triples = np.asarray(triples, np.int64)
        if triples.ndim != 2 or triples.shape[1] != 3:
            raise KGDataError(
                f"'triples' needs shape (n, 3) of (head, relation, tail) (got {triples.shape})"
            )
        heads, relations, tails = triples.T
        self.n_entities = int(n_entities)
        self.n_relations = int(relations.max()) + 1 if len(relations) else 0
        self.rng = np.random.default_rng(seed)
        width = max(self.n_entities, 1)
        # each relation's range: its distinct tails, sorted; and each triple's tail's place in it
        range_keys, key_rank = sorted_unique_inverse(relations * width + tails)
        self._range_tails = narrow_index(range_keys % width)
        self._range_ptr = narrow_index(
            np.searchsorted(range_keys // width, np.arange(self.n_relations + 1))
        )
        rank_in_range = key_rank - self._range_ptr[relations]
        pair = heads * max(self.n_relations, 1) + relations
        self._in_range = ExcludingSampler(pair, rank_in_range, width)
        # the fallback draws only for pairs whose range is exhausted: it keeps those pairs' true
        # tails alone (the same answers for them; at 3.8M triples the whole KG's would hold 46 MiB)
        # counted once per distinct pair, searched in order (a search per triple, in the triples'
        # order, missed the cache: most of 63 s of searches in a profiled 100M session)
        distinct_pairs, pair_index = sorted_unique_inverse(pair)
        tails_known = self._in_range.excluded_count(distinct_pairs)[pair_index]
        exhausted = tails_known >= np.diff(self._range_ptr.astype(np.int64))[relations]
        self._anywhere = ExcludingSampler(pair[exhausted], tails[exhausted], width)

    @classmethod
    def from_dataset(cls, dataset: str | os.PathLike, seed: int = 0) -> KGNegativeSampler:
        from kg_data.graph import open_dataset

        ds = open_dataset(dataset)
        return cls(ds.triples_array(), ds.n_entities, seed)

    def sample(
        self, heads: np.ndarray, relations: np.ndarray, rng: np.random.Generator | None = None
    ) -> np.ndarray:
        """One negative tail per (head, relation) (KG relation ids), as int64 entity ids."""
        heads = np.asarray(heads, np.int64)
        relations = np.asarray(relations, np.int64)
        if relations.size and (relations.min() < 0 or relations.max() >= self.n_relations):
            raise KGDataError(f"'relations' holds ids outside the KG's 0..{self.n_relations - 1}")
        rng = self.rng if rng is None else rng
        pair = heads * max(self.n_relations, 1) + relations
        range_start = self._range_ptr[relations]
        range_size = self._range_ptr[relations + 1] - range_start
        tails = np.empty(len(heads), dtype=np.int64)
        in_range = self._in_range.excluded_count(pair) < range_size
        ranks = self._in_range.draw(pair[in_range], range_size[in_range], rng)
        tails[in_range] = self._range_tails[range_start[in_range] + ranks]
        outside = ~in_range
        if outside.any():
            tails[outside] = self._anywhere.draw(
                pair[outside], self.n_entities, rng, self._describe_pair
            )
        return tails

    def _describe_pair(self, pair: int) -> str:
        head, relation = divmod(pair, max(self.n_relations, 1))
        return f"head {head} links through relation {relation} to every entity"


def _as_pairs(pairs: np.ndarray, name: str) -> np.ndarray:
    pairs = np.asarray(pairs, np.int64)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise KGDataError(f"'{name}' needs shape (n, 2) of (user, item) (got {pairs.shape})")
    return pairs
