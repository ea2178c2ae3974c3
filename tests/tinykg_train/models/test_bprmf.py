"""BPR-MF: the loss is BPR plus the L2 term on the batch's rows; scores are dot products."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tinykg_train.models import build_model


def test_loss_and_scores_follow_the_formulas(tiny_dataset, make_config):
    torch.manual_seed(0)
    model = build_model("bprmf", tiny_dataset, make_config(model="bprmf", l2=0.01))
    users, pos, neg = torch.tensor([0, 3, 3]), torch.tensor([1, 2, 5]), torch.tensor([7, 8, 9])
    u, i, j = model.user_embedding[users], model.item_embedding[pos], model.item_embedding[neg]
    bpr = -F.logsigmoid((u * i).sum(1) - (u * j).sum(1)).mean()
    l2 = (u.pow(2).sum() + i.pow(2).sum() + j.pow(2).sum()) / (2 * 3)
    torch.testing.assert_close(model.loss(users, pos, neg), bpr + 0.01 * l2)
    model.eval()
    model.prepare_scoring()
    expected = model.user_embedding[users] @ model.item_embedding.T
    torch.testing.assert_close(model.score_users(users), expected)


def test_tables_start_xavier_normal_like_recboles_bpr(tiny_dataset, make_config):
    """A wide start (normal std 0.1) made BPR-MF learn several times slower; Xavier-normal it is."""
    torch.manual_seed(0)
    model = build_model("bprmf", tiny_dataset, make_config(model="bprmf", embed_dim=64))
    for table in (model.user_embedding, model.item_embedding):
        expected = (2.0 / (table.shape[0] + table.shape[1])) ** 0.5
        assert abs(float(table.std()) / expected - 1) < 0.05
        assert abs(float(table.mean())) < 0.1 * expected
