"""A dataset dir as PyTorch Geometric graphs, for PyG models and loaders.

    from kg_data import KGDataset, to_hetero_data, to_homogeneous_data
    ds = KGDataset.open("data/music")
    hetero = to_hetero_data(ds)        # HeteroData: node types user, entity; one edge type per relation
    ckg = to_homogeneous_data(ds)      # Data: the collaborative KG, edge_type per edge

`to_hetero_data` keeps the dataset's own ids: node types `user` (`n_users` nodes) and `entity`
(`n_entities` nodes; items are entities `0..n_items-1`), edge types `("user", "interacts",
"entity")` for the interactions of `split` (train by default, file order) and `("entity", "r<id>",
"entity")` for KG relation `id` (its triples head -> tail, file order). Relation names (URIs,
dotted paths, or none) are kept in `relation_names` by id rather than used as edge types: PyG's
`HeteroConv` and `to_hetero` key modules by the edge type and refuse dots. Add reverse edges with
`torch_geometric.transforms.ToUndirected()` when a model needs them.

`to_homogeneous_data` is the CKG that `kg_data.graph.CKG` builds and the trainer propagates over,
as `Data(edge_index, edge_type)`: nodes are the entities then the users (user `u` is node
`n_entities + u`), relations 0 interact (train split), 1 its inverse, `2 + r` KG relation `r`,
`2 + R + r` its inverse; `edge_index` row 0 is the message source (the neighbor), as in PyG.

torch and torch_geometric are imported when a function runs (`pip install 'kg-data[pyg]'`), so the
rest of kg_data keeps working with polars and pyarrow alone.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from kg_data.dataset import KGDataset
from kg_data.graph import CKG, open_dataset

INTERACTS = ("user", "interacts", "entity")


def relation_edge_type(relation: int) -> tuple[str, str, str]:
    """The `HeteroData` edge type of KG relation `relation`: `("entity", "r<id>", "entity")`."""
    return ("entity", f"r{relation}", "entity")


def to_hetero_data(dataset: str | os.PathLike | KGDataset, split: str | None = "train") -> Any:
    """The dataset as a `torch_geometric.data.HeteroData` (see the module docstring); `split`:
    which interactions become `interacts` edges (`None`: every split)."""
    import torch
    from torch_geometric.data import HeteroData

    ds = open_dataset(dataset)
    data = HeteroData()
    data["user"].num_nodes = ds.n_users
    data["entity"].num_nodes = ds.n_entities
    data["entity"].is_item = torch.arange(ds.n_entities) < ds.n_items
    data[INTERACTS].edge_index = torch.from_numpy(np.ascontiguousarray(ds.pairs(split).T))
    triples = ds.triples_array()
    for relation in range(ds.n_relations):
        rows = triples[triples[:, 1] == relation]
        edge_index = np.ascontiguousarray(rows[:, [0, 2]].T)
        data[relation_edge_type(relation)].edge_index = torch.from_numpy(edge_index)
    data.relation_names = _relation_names(ds)
    data.n_items = ds.n_items
    return data


def to_homogeneous_data(dataset: str | os.PathLike | KGDataset, *, cache: bool = True) -> Any:
    """The collaborative KG (`CKG.from_dataset`, train interactions) as a `torch_geometric.data.Data`
    with `edge_index`, `edge_type`, `num_nodes`, `num_relations`, `n_entities`, `n_users`,
    `n_items` and `node_is_user`."""
    import torch
    from torch_geometric.data import Data

    ckg = CKG.from_dataset(dataset, cache=cache)
    tensors = ckg.to_torch()
    return Data(
        edge_index=tensors.edge_index,
        edge_type=tensors.relation,
        num_nodes=ckg.num_nodes,
        num_relations=ckg.num_relations,
        n_entities=ckg.n_entities,
        n_users=ckg.n_users,
        n_items=ckg.n_items,
        node_is_user=torch.arange(ckg.num_nodes) >= ckg.n_entities,
    )


def _relation_names(ds: KGDataset) -> list[str | None]:
    """The relations' original names by id (None where the raw data had none)."""
    frame = ds.relations().sort("id").collect()
    names = dict(zip(frame["id"].to_list(), frame["name"].to_list(), strict=True))
    return [names.get(relation) for relation in range(ds.n_relations)]
