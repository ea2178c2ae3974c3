"""The tiny dataset and its collaborative KG, opened once per test module; and shared training
steps for the RowTables tests: a BPR-like loss over user and entity tables plus a
relation table of another width, with skewed (power-law-like) ids so steps overlap, duplicates in
every lookup, steps that leave the relation table out, and steps that gather it without using it."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(scope="module")
def dataset(tiny_dataset_dir):
    """The tiny dataset (tests/conftest.py), opened as a `kg_data.KGDataset`."""
    from kg_data import KGDataset

    return KGDataset.open(tiny_dataset_dir)


@pytest.fixture(scope="module")
def ckg(dataset):
    """The tiny dataset's collaborative KG."""
    from kg_data import CKG

    return CKG.from_dataset(dataset)


SIZES = {"user": (1500, 8), "entity": (3000, 8), "relation": (40, 5)}
LR, BETAS, EPS = 0.02, (0.9, 0.99), 1e-7


@dataclass
class Step:
    users: torch.Tensor
    items: torch.Tensor
    negatives: torch.Tensor
    relations: torch.Tensor | None  # None: the relation table is not gathered
    use_relations: bool  # False: gathered, but no gradient reaches it

    @property
    def needed(self) -> dict[str, torch.Tensor]:
        needed = {"user": self.users, "entity": torch.cat([self.items, self.negatives.flatten()])}
        if self.relations is not None:
            needed["relation"] = self.relations
        return needed


def _skewed(generator: torch.Generator, n_rows: int, shape: tuple[int, ...]) -> torch.Tensor:
    return (torch.rand(shape, generator=generator) ** 3 * n_rows).long().clamp_max(n_rows - 1)


def make_steps(n_steps: int, batch: int = 48, seed: int = 0) -> list[Step]:
    generator = torch.Generator().manual_seed(seed)
    steps = []
    for k in range(n_steps):
        relations = None if k % 3 == 2 else _skewed(generator, SIZES["relation"][0], (batch,))
        steps.append(
            Step(
                users=_skewed(generator, SIZES["user"][0], (batch,)),
                items=_skewed(generator, SIZES["entity"][0], (batch,)),
                negatives=_skewed(generator, SIZES["entity"][0], (batch, 2)),
                relations=relations,
                use_relations=k % 5 != 4,
            )
        )
    return steps


def step_loss(step: Step, lookup) -> torch.Tensor:
    """The loss of one step, given `lookup(table, ids) -> rows`."""
    users = lookup("user", step.users)
    positive = (users * lookup("entity", step.items)).sum(-1)
    negative = (users.unsqueeze(1) * lookup("entity", step.negatives)).sum(-1)
    loss = F.softplus(negative - positive.unsqueeze(1)).mean()
    if step.relations is not None and step.use_relations:
        loss = loss + (lookup("relation", step.relations) - 0.5).pow(2).mean()
    return loss


def initial_tables(seed: int = 1) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=generator) * 0.1 for name, shape in SIZES.items()}


def train(tables, steps: list[Step], lookahead: int = 0) -> None:
    """Run `steps` through RowTables, hinting `lookahead` steps ahead."""
    for step in steps[:lookahead]:
        tables.prefetch(step.needed)
    for k, step in enumerate(steps):
        rows = tables.gather(step.needed)
        if lookahead and k + lookahead < len(steps):
            tables.prefetch(steps[k + lookahead].needed)
        step_loss(step, rows).backward()
        tables.step(rows)


def train_reference(weights: dict[str, torch.Tensor], steps: list[Step], device: str = "cpu"):
    """The same steps through nn.Embedding(sparse=True) and torch.optim.SparseAdam."""
    embeddings = {
        name: torch.nn.Embedding.from_pretrained(w.clone(), freeze=False, sparse=True).to(device)
        for name, w in weights.items()
    }
    optimizer = torch.optim.SparseAdam(
        [e.weight for e in embeddings.values()], lr=LR, betas=BETAS, eps=EPS
    )
    for step in steps:
        optimizer.zero_grad()
        step_loss(step, lambda table, ids: embeddings[table](ids.to(device))).backward()
        optimizer.step()
    return embeddings, optimizer


def assert_same_state(state_a: dict, state_b: dict) -> None:
    """Two RowTables state_dicts hold the same bits."""
    assert state_a["tables"].keys() == state_b["tables"].keys()
    for name, entry in state_a["tables"].items():
        for key, value in entry.items():
            other = state_b["tables"][name][key]
            assert torch.equal(value.cpu(), other.cpu()), f"{name}.{key} differs"


@pytest.fixture
def kit() -> SimpleNamespace:
    """The helpers above, for test modules (conftest is not importable under importlib mode)."""
    return SimpleNamespace(
        SIZES=SIZES, LR=LR, BETAS=BETAS, EPS=EPS, make_steps=make_steps, step_loss=step_loss,
        initial_tables=initial_tables, train=train, train_reference=train_reference,
        assert_same_state=assert_same_state,
    )  # fmt: skip
