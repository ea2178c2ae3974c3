"""KGIN: intent independence measures, edge dropout, propagation against a plain reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tinykg_train.errors import ConfigError
from tinykg_train.models import build_model
from tinykg_train.models.kgin import (
    KGIN,
    distance_correlation,
    intent_independence,
    pairwise_distance_correlation,
)


def build(dataset, make_config, **extra) -> KGIN:
    torch.manual_seed(0)
    return build_model("kgin", dataset, make_config(model="kgin", extra=extra))


def reference_dcor(x: np.ndarray, y: np.ndarray) -> float:
    """Sample distance correlation from its definition (Szekely, Rizzo & Bakirov 2007)."""

    def centered(v):
        d = np.abs(v[:, None] - v[None, :])
        return d - d.mean(0) - d.mean(1)[:, None] + d.mean()

    a, b = centered(x), centered(y)
    dcov = lambda p, q: np.sqrt(max((p * q).mean(), 0.0))  # noqa: E731
    return dcov(a, b) / np.sqrt(dcov(a, a) * dcov(b, b))


def test_distance_correlation_matches_the_definition():
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    for y in (rng.normal(size=50), x**2, 3 * x + 1):
        got = float(distance_correlation(torch.from_numpy(x), torch.from_numpy(y)))
        assert got == pytest.approx(reference_dcor(x, y), abs=1e-4)
    assert float(
        distance_correlation(torch.from_numpy(x), torch.from_numpy(-2 * x))
    ) == pytest.approx(1.0, abs=1e-4)


def test_pairwise_distance_correlation_equals_each_pair_in_value_and_gradient():
    torch.manual_seed(0)
    weights = torch.randn(5, 30, dtype=torch.float64, requires_grad=True)
    batched = pairwise_distance_correlation(weights)
    for i in range(5):
        for j in range(5):
            pair = distance_correlation(weights[i], weights[j])
            assert float(batched[i, j]) == pytest.approx(float(pair), abs=1e-12)
    penalty = intent_independence(weights, "distance")
    by_pairs = sum(
        distance_correlation(weights[i], weights[j]) for i in range(5) for j in range(i + 1, 5)
    )
    (got,) = torch.autograd.grad(penalty, weights)
    (want,) = torch.autograd.grad(by_pairs, weights)
    assert float(penalty) == pytest.approx(float(by_pairs), abs=1e-12)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_independence_penalty_is_zero_for_unrelated_intents_and_grows_with_overlap():
    orthogonal = torch.eye(4)
    assert float(intent_independence(orthogonal, "cosine")) == pytest.approx(0.0)
    same = torch.ones(3, 6) + torch.arange(6.0)
    assert float(intent_independence(same, "cosine")) == pytest.approx(3.0)  # 3 pairs, cos^2 = 1
    assert float(intent_independence(same, "distance")) == pytest.approx(3.0, abs=1e-3)
    torch.manual_seed(0)
    random = torch.randn(3, 200)
    assert float(intent_independence(random, "distance")) < 0.5


def test_independence_term_is_added_to_the_loss(tiny_dataset, make_config):
    batch = [torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([2, 3])]
    model = build(tiny_dataset, make_config, edge_dropout=0.0, independence_weight=0.5)
    model.eval()
    with_term = model.loss(*batch)
    model.extra["independence_weight"] = 0.0
    without = model.loss(*batch)
    expected = 0.5 * intent_independence(model.intent_relation_logits, "distance")
    torch.testing.assert_close(with_term - without, expected)


def test_propagation_matches_a_plain_reference(tiny_dataset, make_config):
    model = build(tiny_dataset, make_config)
    model.eval()  # no edge or message dropout
    assert model.kg_relation.dtype == model.kg_edge_index.dtype == torch.int32  # 4 bytes per edge
    users, items = model.propagate()

    tails, heads = model.kg_edge_index.long()
    pairs = torch.from_numpy(tiny_dataset.pairs("train"))
    interact = torch.zeros(model.n_users, model.n_entities)
    interact[pairs[:, 0], pairs[:, 1]] = 1.0
    interact = interact / interact.sum(1, keepdim=True).clamp(min=1)
    intents = F.softmax(model.intent_relation_logits, -1) @ model.relation_embedding
    user, entity = model.user_embedding, model.entity_embedding
    user_sum, entity_sum = user, entity
    for _ in range(len(model.layers)):
        messages = entity[tails] * model.relation_embedding[model.kg_relation]
        aggregated = torch.zeros_like(entity).index_add(0, heads, messages)
        aggregated = aggregated / torch.bincount(heads, minlength=len(entity)).clamp(min=1)[:, None]
        beta = F.softmax(user @ model.intent_query.T, dim=1)
        item_mean = interact @ entity
        user = F.normalize(item_mean * (beta @ intents) + item_mean, dim=1)
        entity = F.normalize(aggregated, dim=1)
        user_sum, entity_sum = user_sum + user, entity_sum + entity
    torch.testing.assert_close(users, user_sum, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(items, entity_sum[: model.n_items], rtol=1e-4, atol=1e-5)


def test_edge_dropout_keeps_the_configured_share_while_training(tiny_dataset, make_config):
    model = build(tiny_dataset, make_config, edge_dropout=0.25)
    n_kg = model.kg_relation.shape[0]
    model.train()
    index, relation = model.kg_edges()
    assert index.shape[1] == relation.shape[0] == int(n_kg * 0.75)
    weights = model.interaction_weights()
    kept = weights > 0
    assert 0.7 < float(kept.float().mean()) < 0.8
    torch.testing.assert_close(weights[kept], model.ui_weight[kept] / 0.75)
    model.eval()
    assert model.kg_edges()[0] is model.kg_edge_index
    assert model.interaction_weights() is model.ui_weight


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"independence": "mi"}, "'independence' \\(in extra\\) needs one of distance, cosine"),
        ({"edge_dropout": 1.0}, "'edge_dropout' \\(in extra\\) needs a number in \\[0, 1\\)"),
    ],
)
def test_bad_knobs_are_config_errors(tiny_dataset, make_config, extra, message):
    with pytest.raises(ConfigError, match=message):
        build(tiny_dataset, make_config, **extra)
