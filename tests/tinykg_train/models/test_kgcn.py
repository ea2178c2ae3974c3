"""KGCN: all-item scoring equals the per-pair receptive-field computation, and the receptive field."""

from __future__ import annotations

import pytest
import torch

from kg_data import kg_neighbor_table
from tinykg_train.errors import ConfigError
from tinykg_train.models import build_model
from tinykg_train.models import kgcn as kgcn_module
from tinykg_train.models.kgcn import KGCN, ScoringPlan


def build(dataset, make_config, **settings) -> KGCN:
    torch.manual_seed(0)
    return build_model("kgcn", dataset, make_config(model="kgcn", **settings))


def tree_scores(model: KGCN, users: torch.Tensor) -> torch.Tensor:
    """Scores through the training path: each (user, item) pair's own receptive field."""
    n_items = model.n_items
    pair_users = users.repeat_interleave(n_items)
    items = torch.arange(n_items).repeat(len(users))
    user_vectors = model.user_embedding[pair_users]
    vectors = model.item_vectors(model.relation_scores(user_vectors), items)
    return (user_vectors * vectors).sum(-1).view(len(users), n_items)


@pytest.mark.parametrize("hops", [1, 2])
def test_scoring_all_items_equals_the_per_pair_computation(tiny_dataset, make_config, hops):
    model = build(tiny_dataset, make_config, n_layers=hops)
    with torch.no_grad():  # biases off zero (their init), so their path is checked too
        for linear in model.aggregators:
            linear.linear.bias.normal_(0, 0.1)
    model.eval()
    users = torch.tensor([0, 7, 42])
    with torch.no_grad():
        expected = tree_scores(model, users)
    torch.testing.assert_close(model.score_users(users), expected, rtol=1e-4, atol=1e-5)


def test_scoring_is_chunked_over_users_without_changing_scores(
    tiny_dataset, make_config, monkeypatch
):
    model = build(tiny_dataset, make_config, n_layers=2)
    model.eval()
    users = torch.arange(10)
    whole = model.score_users(users)
    monkeypatch.setattr(kgcn_module, "SCORING_BUDGET", 1)  # one user per chunk
    torch.testing.assert_close(model.score_users(users), whole)


def test_scoring_plan_covers_each_items_receptive_field(tiny_dataset, make_config):
    model = build(tiny_dataset, make_config, n_layers=2)
    plan = ScoringPlan.build(model.neighbors, model.n_items, 2)
    assert torch.equal(plan.nodes[0], torch.arange(model.n_items))
    for level in range(2):
        outer = plan.nodes[level + 1]
        assert torch.equal(outer[plan.self_index[level]], plan.nodes[level])
        assert torch.equal(outer[plan.neighbor_index[level]], model.neighbors[plan.nodes[level]])


def test_neighbors_are_the_datasets_fixed_size_table(tiny_dataset, make_config):
    model = build(tiny_dataset, make_config, kg_neighbors=4, seed=3)
    neighbors, relations = kg_neighbor_table(tiny_dataset, 4, 3)
    assert torch.equal(model.neighbors, torch.from_numpy(neighbors))
    assert torch.equal(model.neighbor_relations, torch.from_numpy(relations))


def test_user_relation_attention_decides_which_neighbors_count(tiny_dataset, make_config):
    """A user who scores one relation far above the others sees neighbors by that relation only."""
    model = build(tiny_dataset, make_config, n_layers=1)
    model.eval()
    with torch.no_grad():
        model.relation_embedding.zero_()
        model.relation_embedding[0, 0] = 1000.0
        model.user_embedding[0] = 0
        model.user_embedding[0, 0] = 1.0
    item = int((model.neighbor_relations[: model.n_items] == 0).any(1).nonzero()[0])
    weights = model.level_weights(
        model.relation_scores(model.user_embedding[:1]), model.scoring_plan(), 0
    )[0, item]
    on_relation_0 = model.neighbor_relations[item] == 0
    torch.testing.assert_close(weights[~on_relation_0], torch.zeros(int((~on_relation_0).sum())))
    torch.testing.assert_close(weights.sum(), torch.tensor(1.0))


def test_needs_at_least_one_hop(tiny_dataset, make_config):
    with pytest.raises(ConfigError, match="KGCN needs 'n_layers' >= 1"):
        build(tiny_dataset, make_config, n_layers=0)
