"""kg_data.pyg: a dataset dir as PyG graphs, with exactly the dataset's nodes, ids and edges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from kg_data import CKG, KGDataset, to_hetero_data, to_homogeneous_data
from kg_data.pyg import INTERACTS, relation_edge_type

pytest.importorskip("torch_geometric")


@pytest.fixture(scope="module")
def dataset(tiny_dataset_dir: Path) -> KGDataset:
    return KGDataset.open(tiny_dataset_dir)


def test_hetero_data_holds_the_users_entities_and_every_edge_with_the_dataset_s_ids(dataset):
    data = to_hetero_data(dataset)
    data.validate()
    assert (data["user"].num_nodes, data["entity"].num_nodes) == (
        dataset.n_users,
        dataset.n_entities,
    )
    assert int(data["entity"].is_item.sum()) == dataset.n_items
    assert bool(data["entity"].is_item[: dataset.n_items].all())  # items are entities 0..n_items-1
    # the train interactions, in file order: user ids row 0, item (entity) ids row 1
    assert torch.equal(data[INTERACTS].edge_index, torch.from_numpy(dataset.pairs("train").T))
    assert data[INTERACTS].edge_index.dtype == torch.int64
    triples = dataset.triples_array()
    assert len(data.edge_types) == 1 + dataset.n_relations
    for relation in range(dataset.n_relations):
        rows = triples[triples[:, 1] == relation]
        edge_index = data[relation_edge_type(relation)].edge_index
        assert torch.equal(edge_index, torch.from_numpy(rows[:, [0, 2]].T.copy()))  # head -> tail
    kg_edges = sum(data[relation_edge_type(r)].num_edges for r in range(dataset.n_relations))
    assert kg_edges == dataset.n_triples == len(triples)
    assert len(data.relation_names) == dataset.n_relations and data.n_items == dataset.n_items


def test_hetero_data_takes_the_interactions_of_the_split_asked_for(dataset):
    every = to_hetero_data(dataset, split=None)[INTERACTS].edge_index
    test = to_hetero_data(dataset, split="test")[INTERACTS].edge_index
    assert every.shape[1] == dataset.n_interactions() and test.shape[1] == dataset.n_interactions(
        "test"
    )
    assert torch.equal(test, torch.from_numpy(dataset.pairs("test").T))


def test_edge_types_work_as_pyg_module_keys(dataset):
    """Relation names (dotted paths, URIs) are not edge types: `HeteroConv` keys its modules by them."""
    from torch_geometric.nn import HeteroConv, SAGEConv

    data = to_hetero_data(dataset)
    conv = HeteroConv({edge_type: SAGEConv((-1, -1), 8) for edge_type in data.edge_types})
    x = {"user": torch.randn(dataset.n_users, 4), "entity": torch.randn(dataset.n_entities, 4)}
    out = conv(x, data.edge_index_dict)
    assert out["entity"].shape == (dataset.n_entities, 8)


def test_homogeneous_data_is_the_trainer_s_collaborative_kg(dataset):
    data = to_homogeneous_data(dataset, cache=False)
    data.validate()
    ckg = CKG.build(dataset)
    assert data.num_nodes == dataset.n_entities + dataset.n_users == ckg.num_nodes
    assert data.num_relations == 2 + 2 * dataset.n_relations
    train, triples = dataset.n_interactions("train"), dataset.n_triples
    assert data.num_edges == 2 * train + 2 * triples
    counts = torch.bincount(data.edge_type, minlength=data.num_relations)
    assert counts[0] == counts[1] == train and int(counts[2:].sum()) == 2 * triples
    # interact edges (relation 0) carry exactly the train pairs: row 0 is the message source
    source, target = data.edge_index[:, data.edge_type == 0].numpy()
    got = sorted(zip((target - dataset.n_entities).tolist(), source.tolist(), strict=True))
    want = sorted(map(tuple, dataset.pairs("train").tolist()))
    assert got == want
    # KG relation r is edge type 2 + r, head <- tail (the message flows from tail to head)
    triples_array = dataset.triples_array()
    source, target = data.edge_index[:, data.edge_type == 2].numpy()
    rows = triples_array[triples_array[:, 1] == 0]
    assert sorted(zip(target.tolist(), source.tolist(), strict=True)) == sorted(
        zip(rows[:, 0].tolist(), rows[:, 2].tolist(), strict=True)
    )
    assert torch.equal(data.node_is_user, torch.arange(data.num_nodes) >= dataset.n_entities)
    assert np.array_equal(data.edge_index.numpy(), np.stack(ckg.coo()[1::-1]))
