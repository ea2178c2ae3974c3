"""The collaborative knowledge graph (CKG) of a dataset dir, in CSR form, cached next to the data.

KGAT convention (docs/INTERFACES.md): nodes are the entities (items first), then the users (user `u`
is node `n_entities + u`). Relations: 0 user->item "interact" (train split only), 1 its inverse,
`2 + r` KG relation `r` (head -> tail), `2 + R + r` its inverse. CSR rows are the source `h` of each
edge (h, rel, t); a message flows from `t` to `h`.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kg_data.csr import build_csr, sample_rows
from kg_data.dataset import KGDataset
from kg_data.errors import KGDataError
from kg_data.index_dtype import narrow_codes, narrow_index

INTERACT = 0
INTERACTED_BY = 1
CACHE_DIR = "cache"
_CACHE_VERSION = 1


def open_dataset(dataset: str | os.PathLike | KGDataset) -> KGDataset:
    """Accept a dataset dir path or an opened `KGDataset`."""
    return dataset if isinstance(dataset, KGDataset) else KGDataset.open(dataset)


@dataclass(frozen=True, eq=False)
class CKG:
    """Collaborative KG: CSR arrays (numpy int64; `narrowed()` int32) plus the sizes needed to read
    node and relation ids."""

    indptr: np.ndarray
    indices: np.ndarray
    relation: np.ndarray
    n_entities: int
    n_users: int
    n_items: int
    n_kg_relations: int

    @property
    def num_nodes(self) -> int:
        return self.n_entities + self.n_users

    def narrowed(self) -> CKG:
        """The same graph with `indices` in the narrowest index dtype (int32 below 2**31 nodes)
        and `relation` in the narrowest that holds its ids (int8 below 128 relations), for a
        process that holds the CKG from the first step to the last (sampled training: 184 MiB
        less than int64 at 17.5M edges). `NeighborSampler` draws the same subgraphs from it, with
        the same int64 arrays."""
        return dataclasses.replace(
            self, indices=narrow_index(self.indices), relation=narrow_codes(self.relation)
        )

    @property
    def num_relations(self) -> int:
        return 2 + 2 * self.n_kg_relations

    @property
    def num_edges(self) -> int:
        return len(self.indices)

    @property
    def degree(self) -> np.ndarray:
        """Out-degree of every node (the number of neighbors its CSR row lists)."""
        return np.diff(self.indptr)

    def user_node(self, users: np.ndarray) -> np.ndarray:
        """CKG node ids of the given user ids."""
        return np.asarray(users, np.int64) + self.n_entities

    def coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every edge as `(heads, tails, relations)`: the CSR row `h`, its neighbor `t`, the relation id."""
        heads = np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.degree)
        return heads, self.indices, self.relation

    def to_torch(self) -> CKGTensors:
        """The graph as torch int64 tensors, with a message-passing `edge_index` ([t; h]: source row 0)."""
        import torch

        heads, tails, relations = self.coo()
        return CKGTensors(
            indptr=torch.from_numpy(self.indptr),
            indices=torch.from_numpy(self.indices),
            relation=torch.from_numpy(relations),
            edge_index=torch.from_numpy(np.stack([tails, heads])),
            num_nodes=self.num_nodes,
            num_relations=self.num_relations,
        )

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_dataset(cls, dataset: str | os.PathLike | KGDataset, *, cache: bool = True) -> CKG:
        """Build the CKG of a dataset dir, or load it from `DIR/cache/ckg-<fingerprint>.npz`.

        The cache file is named by the dataset's content fingerprint, so changed data is never read
        through a stale cache; it is written to a temporary file and renamed (never half-written).
        """
        ds = open_dataset(dataset)
        path = ds.path / CACHE_DIR / f"ckg-v{_CACHE_VERSION}-{ds.fingerprint}.npz"
        if cache and path.is_file():
            return cls._load(path)
        ckg = cls.build(ds)
        if cache:
            ckg._save(path)
        return ckg

    @classmethod
    def build(cls, ds: KGDataset) -> CKG:
        """Assemble the edges (interactions of the train split, KG triples, and their inverses) into a CSR."""
        n_entities, n_kg = ds.n_entities, ds.n_relations
        pairs = ds.pairs("train")
        triples = ds.triples_array()
        users, items = pairs[:, 0] + n_entities, pairs[:, 1]
        heads, rels, tails = triples[:, 0], triples[:, 1], triples[:, 2]
        src = np.concatenate([users, items, heads, tails])
        dst = np.concatenate([items, users, tails, heads])
        rel = np.concatenate(
            [
                np.full(len(pairs), INTERACT),
                np.full(len(pairs), INTERACTED_BY),
                rels + 2,
                rels + 2 + n_kg,
            ]
        )
        indptr, indices, relation = build_csr(src, dst, rel, n_entities + ds.n_users)
        return cls(indptr, indices, relation, n_entities, ds.n_users, ds.n_items, n_kg)

    def _save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        sizes = np.array(
            [self.n_entities, self.n_users, self.n_items, self.n_kg_relations], dtype=np.int64
        )
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(
                    handle,
                    indptr=self.indptr,
                    indices=self.indices,
                    relation=self.relation,
                    sizes=sizes,
                )
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def _load(cls, path: Path) -> CKG:
        try:
            with np.load(path, allow_pickle=False) as data:
                n_entities, n_users, n_items, n_kg = (int(v) for v in data["sizes"])
                return cls(
                    data["indptr"],
                    data["indices"],
                    data["relation"],
                    n_entities,
                    n_users,
                    n_items,
                    n_kg,
                )
        except (OSError, KeyError, ValueError) as exc:
            raise KGDataError(
                f"{path}: unreadable graph cache ({exc}); delete it and open the dataset again"
            ) from None

    def __repr__(self) -> str:
        return (
            f"CKG(nodes={self.num_nodes} [entities={self.n_entities}, users={self.n_users}], "
            f"edges={self.num_edges}, relations={self.num_relations})"
        )


@dataclass(frozen=True)
class CKGTensors:
    """`CKG.to_torch()`: CSR tensors plus `edge_index` (row 0 neighbor `t`, row 1 updated node `h`)."""

    indptr: Any
    indices: Any
    relation: Any
    edge_index: Any
    num_nodes: int
    num_relations: int


def kg_neighbor_table(
    dataset: str | os.PathLike | KGDataset, k: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """KGCN's fixed-size neighborhoods over the KG alone, seen as undirected.

    Returns `(neighbors, relations)`, both `[n_entities, k]` int64; relation ids are the KG's
    (`0..n_relations-1`, the same id in both directions). An entity with at least `k` neighbors gets
    `k` distinct ones, one with fewer gets `k` draws with replacement, and an isolated entity points
    to itself `k` times (relation 0: a placeholder, the neighbor is the entity's own vector).
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise KGDataError(f"'k' needs to be a positive integer in 'kg_neighbor_table' (got {k!r})")
    ds = open_dataset(dataset)
    triples = ds.triples_array()
    heads, rels, tails = triples[:, 0], triples[:, 1], triples[:, 2]
    n = ds.n_entities
    indptr, indices, relation = build_csr(
        np.concatenate([heads, tails]),
        np.concatenate([tails, heads]),
        np.concatenate([rels, rels]),
        n,
    )
    rng = np.random.default_rng(seed)
    degrees = np.diff(indptr)
    neighbors = np.repeat(np.arange(n, dtype=np.int64)[:, None], k, axis=1)
    relations = np.zeros((n, k), dtype=np.int64)
    for replace, rows in (
        (False, np.flatnonzero(degrees >= k)),
        (True, np.flatnonzero((degrees > 0) & (degrees < k))),
    ):
        _, positions = sample_rows(indptr[rows], degrees[rows], k, rng, replace=replace)
        neighbors[rows] = indices[positions].reshape(-1, k)
        relations[rows] = relation[positions].reshape(-1, k)
    return neighbors, relations
