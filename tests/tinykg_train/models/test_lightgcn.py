"""LightGCN: propagation equals the dense formula mean_k (D^-1/2 A D^-1/2)^k E."""

from __future__ import annotations

import torch

from tinykg_train.models import build_model


def test_propagation_is_the_mean_of_normalised_adjacency_powers(tiny_dataset, make_config):
    torch.manual_seed(0)
    model = build_model("lightgcn", tiny_dataset, make_config(model="lightgcn", n_layers=3))
    n_users, n_items = tiny_dataset.n_users, tiny_dataset.n_items
    pairs = torch.from_numpy(tiny_dataset.pairs("train"))
    adjacency = torch.zeros(n_items + n_users, n_items + n_users)
    adjacency[pairs[:, 1], pairs[:, 0] + n_items] = 1.0
    adjacency[pairs[:, 0] + n_items, pairs[:, 1]] = 1.0
    inv_sqrt = adjacency.sum(1).clamp(min=1).rsqrt()
    normalised = inv_sqrt[:, None] * adjacency * inv_sqrt[None, :]
    x = model.embedding.detach()
    layers = [x]
    for _ in range(3):
        layers.append(normalised @ layers[-1])
    expected = torch.stack(layers).mean(0)
    users, items = model.propagate()
    torch.testing.assert_close(users, expected[n_items:], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(items, expected[:n_items], rtol=1e-4, atol=1e-6)


def test_zero_layers_is_matrix_factorisation(tiny_dataset, make_config):
    torch.manual_seed(0)
    model = build_model("lightgcn", tiny_dataset, make_config(model="lightgcn", n_layers=0))
    users, items = model.propagate()
    assert torch.equal(items, model.embedding[: tiny_dataset.n_items])
