"""`prepare_scoring(users=...)`: a ranking of some users keeps only their vectors, with the same
scores and metrics as a ranking that kept everyone's; a user outside them is a one-line error."""

from __future__ import annotations

import pytest
import torch

from tinykg_train.errors import TinyKGError
from tinykg_train.evaluate import RankingEvaluator
from tinykg_train.models import build_model


class EveryUser(torch.nn.Module):
    """A model written before `users` existed: its `prepare_scoring` takes none."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def prepare_scoring(self) -> None:
        self.model.prepare_scoring()

    def score_users(self, users):
        return self.model.score_users(users)


@pytest.fixture(params=["kgat", "lightgcn", "kgin"])
def model(request, tiny_dataset, make_config):
    torch.manual_seed(0)
    return build_model(request.param, tiny_dataset, make_config(model=request.param)).eval()


def test_the_kept_rows_are_propagate_s_rows(model):
    users = torch.tensor([7, 2, 2, 11, 0])
    with torch.no_grad():
        everyone, items = model.propagate()
        model.prepare_scoring(users=users)
    kept_users, kept_items = model._scoring
    assert kept_users.shape[0] == 4  # the distinct users only
    assert torch.equal(kept_users, everyone[torch.tensor([0, 2, 7, 11])])
    assert torch.equal(kept_items, items)
    assert torch.equal(model.score_users(users), everyone[users] @ items.T)


def test_a_user_outside_the_prepared_ones_is_a_one_line_error(model):
    model.prepare_scoring(users=torch.tensor([1, 3]))
    with pytest.raises(TinyKGError, match=r"user 2 is not among the users") as error:
        model.score_users(torch.tensor([1, 2]))
    assert "\n" not in str(error.value)
    model.train()  # back to training: the cache goes, and a later score_users prepares everyone
    assert model.score_users(torch.tensor([2])).shape[0] == 1


@pytest.mark.parametrize("split", ["valid", "test"])
def test_a_sampled_ranking_gives_the_metrics_of_one_that_kept_every_user(
    model, tiny_dataset, split
):
    evaluator = RankingEvaluator(tiny_dataset, (5, 20), sample_users=40, seed=3)
    model.train()  # as between epochs
    subset = evaluator.evaluate(model, split)
    assert model._scoring_users is None  # back to training mode: the cache was dropped
    assert subset == evaluator.evaluate(EveryUser(model), split)
