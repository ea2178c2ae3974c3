"""KGAT: attention (formula, softmax per head, refresh), TransR phase, propagation, ranking quality."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kg_data import CKG
from tinykg_train.compress.adaptive.sensitivity import measure
from tinykg_train.compress.gathered import gathered_rows
from tinykg_train.errors import ConfigError
from tinykg_train.evaluate import RankingEvaluator
from tinykg_train.models import build_model
from tinykg_train.models.graphs import ckg_edges
from tinykg_train.models.kgat import KGAT, default_layer_dims


@pytest.fixture
def kgat(tiny_dataset, make_config) -> KGAT:
    torch.manual_seed(0)
    return build_model("kgat", tiny_dataset, make_config(model="kgat"))


def reference_attention(model: KGAT, dataset) -> torch.Tensor:
    """pi(h, r, t) = (W_r e_t)^T tanh(W_r e_h + e_r) edge by edge, softmax over each head's edges."""
    e = model.node_embedding.detach()
    tails, heads = model.edge_index.long()
    relation = ckg_edges(dataset).relation  # in the model's edge order
    W = model.transfer.detach()[relation]  # [E, d, k]
    projected_h = torch.bmm(e[heads].unsqueeze(1), W).squeeze(1)
    projected_t = torch.bmm(e[tails].unsqueeze(1), W).squeeze(1)
    scores = (
        projected_t * torch.tanh(projected_h + model.relation_embedding.detach()[relation])
    ).sum(-1)
    attention = torch.empty_like(scores)
    for head in torch.unique(heads):
        edges = (heads == head).nonzero().squeeze(1)
        attention[edges] = torch.softmax(scores[edges], dim=0)
    return attention


def test_edge_index_is_the_ckgs_edges_in_the_datasets_order(kgat, tiny_dataset):
    """Rebuilt from the CSR and the edge order (the graph keeps no edge -> entry map of its own)."""
    assert kgat.graph.slot is None
    edges = ckg_edges(tiny_dataset).edge_index
    assert torch.equal(kgat.edge_index.long(), edges.long())


def test_attention_is_the_papers_formula_normalised_per_head(kgat, tiny_dataset):
    kgat.ensure_attention()  # scored when first read
    torch.testing.assert_close(
        kgat.attention, reference_attention(kgat, tiny_dataset), rtol=1e-4, atol=1e-6
    )
    heads = kgat.edge_index[1].long()
    per_head = torch.zeros(kgat.num_nodes).index_add_(0, heads, kgat.attention)
    has_edges = torch.bincount(heads, minlength=kgat.num_nodes) > 0
    torch.testing.assert_close(per_head[has_edges], torch.ones(int(has_edges.sum())))
    assert (kgat.attention > 0).all()


def test_attention_scored_in_small_chunks_is_the_same_and_its_peak_follows_the_chunk(
    kgat, tiny_dataset, monkeypatch
):
    from tinykg_train.memory import allocation_peak
    from tinykg_train.models import kgat as kgat_module

    dim, edges = kgat.node_embedding.shape[1], kgat.attention.numel()
    peaks = {}
    for chunk_edges in (edges, 3):  # one chunk for every edge; 3 edges at a time (both code paths)
        monkeypatch.setattr(kgat_module, "ATTENTION_CHUNK_FLOATS", chunk_edges * dim)
        kgat.attention.zero_()
        with allocation_peak(torch.device("cpu")) as window:
            kgat.refresh_attention()
        peaks[chunk_edges] = window.peak_bytes
        torch.testing.assert_close(
            kgat.attention, reference_attention(kgat, tiny_dataset), rtol=1e-4, atol=1e-6
        )
    # relations are scored one at a time: whole-relation chunks hold two [edges of the relation,
    # dim] float tensors at once (at least); 3-edge chunks do not
    largest = max(int(count) for count in kgat.relation_edge_counts)
    assert peaks[edges] - peaks[3] >= 2 * (largest - 3) * dim * 4


def test_attention_is_scored_at_its_first_read_not_when_the_model_is_built(
    tiny_dataset, make_config, monkeypatch
):
    calls = []
    refresh = KGAT.refresh_attention
    monkeypatch.setattr(KGAT, "refresh_attention", lambda self: calls.append(1) or refresh(self))
    torch.manual_seed(0)
    model = build_model("kgat", tiny_dataset, make_config(model="kgat"))
    assert calls == []
    with torch.no_grad():  # weights changed after the build are the ones scored
        model.node_embedding.mul_(2.0)
    batch = [torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([2, 3])]
    model.loss(*batch)
    assert len(calls) == 1
    torch.testing.assert_close(
        model.attention, reference_attention(model, tiny_dataset), rtol=1e-4, atol=1e-6
    )
    model.loss(*batch)
    model.on_epoch_start(0)  # an epoch's start always scores afresh
    assert len(calls) == 2


def test_attention_is_refreshed_from_the_current_weights(kgat, tiny_dataset, train):
    kgat.on_epoch_start(0)
    before = kgat.attention.clone()
    train(kgat, tiny_dataset, steps=5)  # on_epoch_start(0) runs before the steps
    stale = kgat.attention.clone()
    torch.testing.assert_close(stale, before)  # unchanged during the epoch: no gradient, a buffer
    kgat.on_epoch_start(1)
    assert not torch.allclose(kgat.attention, stale)
    torch.testing.assert_close(
        kgat.attention, reference_attention(kgat, tiny_dataset), rtol=1e-4, atol=1e-6
    )
    # The propagation reads the merged CSR entries of the same attention.
    tails, heads = kgat.edge_index.long()
    merged = torch.sparse_coo_tensor(torch.stack([heads, tails]), kgat.attention).coalesce()
    torch.testing.assert_close(kgat.attention_entries, merged.values())  # (row, col) order


def test_scoring_refreshes_the_attention_first(kgat, tiny_dataset, train):
    train(kgat, tiny_dataset, steps=5)
    kgat.eval()
    kgat.prepare_scoring()
    torch.testing.assert_close(
        kgat.attention, reference_attention(kgat, tiny_dataset), rtol=1e-4, atol=1e-6
    )


def test_attention_is_not_part_of_the_checkpoint(kgat):
    state = kgat.state_dict()
    assert "attention" not in state and "attention_entries" not in state
    assert "node_embedding" in state and "transfer" in state


def test_propagation_concatenates_normalised_layers(tiny_dataset, make_config):
    torch.manual_seed(0)
    model = build_model("kgat", tiny_dataset, make_config(model="kgat", embed_dim=32, n_layers=3))
    assert [layer.sum_linear.out_features for layer in model.layers] == [32, 16, 8]
    model.eval()
    users, items = model.propagate()
    assert users.shape == (tiny_dataset.n_users, 32 + 32 + 16 + 8)
    assert items.shape == (tiny_dataset.n_items, 32 + 32 + 16 + 8)
    torch.testing.assert_close(items[:, :32], model.node_embedding[: tiny_dataset.n_items])
    norms = items[:, 32:64].norm(dim=1)
    torch.testing.assert_close(norms, torch.ones_like(norms))


BATCH = 1000  # rows enough to be quantized (`min_numel`), a size no graph tensor here has


def test_compressed_scores_read_the_ego_columns_as_table_rows(tiny_dataset, make_config):
    """Compressed, a CF step scores the table's own columns as its rows (saved as indices, exact)
    and quantizes only the layers' columns; FP32 scores the one concatenation as before."""
    torch.manual_seed(0)
    config = make_config(model="kgat", bits=2, embed_dim=32, n_layers=3)
    model = build_model("kgat", tiny_dataset, config)
    model.train()
    model.on_epoch_start(0)
    batch = torch.arange(BATCH)
    users, pos, neg = batch % tiny_dataset.n_users, batch % 7, (batch + 3) % tiny_dataset.n_items
    sensitivity = measure(model, model.loss, (users, pos, neg), model.compression)
    scored = [site.shape for site in sensitivity.sites if site.shape[0] == BATCH]
    assert scored == [(BATCH, 32 + 16 + 8)] * 2  # u and pos - neg: the layers' columns only
    torch.manual_seed(1)  # the same dropout masks in both
    ego, propagated = model.batch_vector_groups(users, pos, neg)
    torch.manual_seed(1)
    whole = model.batch_vectors(users, pos, neg)
    for part, (ego_part, rest) in zip(whole, zip(ego, propagated, strict=True), strict=True):
        assert torch.equal(torch.cat([ego_part, rest], dim=1), part)
    rows = [gathered_rows(part) for part in ego]
    assert all(r is not None and r.weight is model.node_embedding for r in rows)
    exact = build_model("kgat", tiny_dataset, make_config(model="kgat", bits=32))
    assert len(exact.batch_vector_groups(users, pos, neg)) == 1


def test_layer_dims_are_checked(tiny_dataset, make_config):
    assert default_layer_dims(64, 3) == [64, 32, 16]
    assert default_layer_dims(16, 4) == [16, 8, 8, 8]
    with pytest.raises(ConfigError, match="'layer_dims' needs 2 positive sizes"):
        build_model("kgat", tiny_dataset, make_config(extra={"layer_dims": [8]}))


def test_kg_phase_triples_are_true_ckg_edges_against_corruptions(kgat, tiny_dataset):
    ckg = CKG.from_dataset(tiny_dataset)
    heads_all, tails_all, rels_all = ckg.coo()
    edges = set(zip(heads_all.tolist(), rels_all.tolist(), tails_all.tolist(), strict=True))
    triples = torch.from_numpy(tiny_dataset.triples_array()[:50])
    neg_tails = torch.randint(tiny_dataset.n_entities, (50,))
    torch.manual_seed(0)
    h, r, t, nh, nt = kgat.kg_phase_triples(triples[:, 0], triples[:, 1], triples[:, 2], neg_tails)
    assert len(h) == 200
    assert all(triple in edges for triple in zip(h.tolist(), r.tolist(), t.tolist(), strict=True))
    families = set(r.tolist())
    assert {0, 1} <= families and any(x >= 2 + kgat.n_kg_relations for x in families)
    # Exactly one end is corrupted: the tail for (h, r, t) and interactions, the head for inverses.
    changed_head, changed_tail = nh != h, nt != t
    assert not (changed_head & changed_tail).any()
    assert (nh[:50] == h[:50]).all() and (nt[50:100] == t[50:100]).all()


def test_project_matches_per_triple_matrices(kgat):
    nodes = torch.randint(kgat.num_nodes, (3, 40))
    relation = torch.randint(kgat.num_relations, (40,))
    expected = torch.einsum("knd,ndj->knj", kgat.node_embedding[nodes], kgat.transfer[relation])
    torch.testing.assert_close(kgat.project(nodes, relation), expected)


def test_transr_loss_matches_the_formula(kgat):
    h, r, t, nh, nt = (torch.randint(kgat.num_nodes, (30,)) for _ in range(5))
    r = r % kgat.num_relations
    W, e = kgat.transfer[r], kgat.node_embedding
    proj = [torch.bmm(e[x].unsqueeze(1), W).squeeze(1) for x in (h, t, nh, nt)]
    rel = kgat.relation_embedding[r]
    pos = (proj[0] + rel - proj[1]).pow(2).sum(-1)
    neg = (proj[2] + rel - proj[3]).pow(2).sum(-1)
    l2 = sum(x.pow(2).sum() for x in (proj[0], rel, proj[1], proj[2], proj[3])) / (2 * 30)
    expected = -F.logsigmoid(neg - pos).mean() + kgat.l2 * l2
    torch.testing.assert_close(kgat.transr_loss(h, r, t, nh, nt), expected)


def test_transr_loss_falls(kgat, tiny_dataset):
    from kg_data import KGBatches

    optimizer = torch.optim.Adam(kgat.parameters(), lr=1e-2)
    losses = []
    for epoch in range(8):
        for batch in KGBatches(tiny_dataset, 512, seed=0).epoch(epoch):
            optimizer.zero_grad()
            loss = kgat.kg_loss(*batch)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert np.mean(losses[-5:]) < 0.75 * np.mean(losses[:5]), (losses[:5], losses[-5:])


class RandomRanker:
    """The baseline: uniform random scores."""

    def __init__(self, n_items: int) -> None:
        self.n_items, self.training = n_items, False
        self.generator = torch.Generator().manual_seed(0)

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def prepare_scoring(self) -> None:
        pass

    def score_users(self, users):
        return torch.rand(len(users), self.n_items, generator=self.generator)


def test_kgat_beats_a_random_ranker_by_far(tiny_dataset, make_config, train):
    torch.manual_seed(0)
    model = build_model("kgat", tiny_dataset, make_config(model="kgat", embed_dim=32))
    train(model, tiny_dataset, steps=300, lr=5e-3)
    evaluator = RankingEvaluator(tiny_dataset, (20,))
    kgat_recall = evaluator.evaluate(model, "valid")["recall@20"]
    random_recall = evaluator.evaluate(RandomRanker(tiny_dataset.n_items), "valid")["recall@20"]
    assert kgat_recall > 3 * random_recall, (kgat_recall, random_recall)


@pytest.mark.parametrize("sampler", ["none", "neighbor"])
def test_a_whole_graph_session_drops_the_per_edge_attention_a_sampled_one_keeps(
    sampler, tiny_dataset, tiny_dataset_dir, tmp_path
):
    """Whole-graph steps read only the matrix entries: the per-edge copy goes, and a refresh gives
    the entries of a model that kept it, bit for bit; sampled steps read the per-edge copy."""
    from tinykg_train.checkpoint import seed_everything
    from tinykg_train.config import TrainConfig
    from tinykg_train.session import open_session

    sampling = {"sampler": sampler, "fanouts": [4, 4]} if sampler != "none" else {}
    config = TrainConfig(data=str(tiny_dataset_dir), model="kgat", out=str(tmp_path), embed_dim=16,
                         n_layers=2, **sampling)  # fmt: skip
    model = open_session(config, torch.device("cpu")).model
    seed_everything(config.seed)
    kept = build_model("kgat", tiny_dataset, config)  # the session's weights: same seed, same draws
    assert kept.attention is not None
    assert (model.attention is None) == (sampler == "none")
    if sampler != "none":
        return
    with torch.no_grad():  # move the weights so the refresh has something new to compute
        for m in (model, kept):
            m.node_embedding.mul_(1.5)
    model.refresh_attention()
    kept.refresh_attention()
    assert model.attention is None and model.edges_by_relation is None
    # no session keeps the graph's edge -> entry map: the edge order holds it
    assert model.graph.slot is None and kept.graph.slot is None
    assert torch.equal(model.attention_entries, kept.attention_entries)
    # the KG phase's user-item draws read the entries in relation order: the same pairs
    for m in (model, kept):
        torch.manual_seed(5)
        m.drawn = m.sample_interactions(64)
    assert all(torch.equal(a, b) for a, b in zip(model.drawn, kept.drawn, strict=True))
    users, items, _ = model.drawn
    pairs = set(zip(kept.edge_index[1].tolist(), kept.edge_index[0].tolist(), strict=True))
    assert all((u, i) in pairs for u, i in zip(users.tolist(), items.tolist(), strict=True))
    with pytest.raises(RuntimeError, match="dropped for whole-graph training"):
        model.sampled_attention(None)
    with pytest.raises(RuntimeError, match="edge order was dropped for whole-graph training"):
        _ = model.edge_index


@pytest.mark.parametrize("name", ["kgin", "lightgcn"])
def test_whole_graph_sessions_of_other_models_drop_their_graphs_edge_maps(
    name, tiny_dataset_dir, tmp_path
):
    """KGIN's and LightGCN's edge -> entry maps served their matrix entries at build time only."""
    from tinykg_train.config import TrainConfig
    from tinykg_train.session import open_session

    config = TrainConfig.for_model(name, data=str(tiny_dataset_dir), out=str(tmp_path), embed_dim=8)
    model = open_session(config, torch.device("cpu")).model
    graph = model.ui_graph if name == "kgin" else model.graph
    assert graph.slot is None
    with pytest.raises(RuntimeError, match="forget_edges"):
        graph.values(torch.ones(3))
