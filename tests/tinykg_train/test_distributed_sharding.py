"""Data-parallel arithmetic without Ray: each worker's slice of a batch, and that the slices' gradients
weighted by their share of the rows add up to the whole batch's gradient (what the all-reduce then
computes), for every model's loss. The all-reduce itself runs in a real two-process gloo group."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tinykg_train.config import TrainConfig
from tinykg_train.distributed.collective import average_gradients
from tinykg_train.distributed.sharding import ShardedBatches, shard_bounds
from tinykg_train.errors import TinyKGError


class FixedBatches:
    """A batch source with the `epoch(e)` / `len()` shape of kg_data's, yielding given batches."""

    def __init__(self, batches):
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def epoch(self, epoch):
        return iter(self.batches)


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
@pytest.mark.parametrize("rows", [1, 2, 7, 64, 1001])
def test_the_workers_slices_are_disjoint_and_cover_the_batch(rows, world_size):
    covered = []
    for rank in range(world_size):
        start, stop = shard_bounds(rows, rank, world_size)
        assert 0 <= start <= stop <= rows
        assert stop - start in (rows // world_size, rows // world_size + 1)
        covered.extend(range(start, stop))
    assert covered == list(range(rows))


def test_each_worker_gets_its_rows_and_their_weight():
    batch = (torch.arange(10), torch.arange(10) * 2, torch.arange(10) * 3)
    seen = []
    for rank in range(3):
        weights = []
        sharded = ShardedBatches(
            FixedBatches([batch]), rank, 3, lambda *w, seen=weights: seen.append(w)
        )
        assert len(sharded) == 1
        [piece] = list(sharded.epoch(0))
        seen.append(piece[0])
        assert torch.equal(piece[1], piece[0] * 2) and torch.equal(piece[2], piece[0] * 3)
        assert weights == [(len(piece[0]), 10)]
    assert torch.equal(torch.cat(seen), torch.arange(10))


def test_a_worker_left_without_rows_trains_on_a_stand_in_row_with_weight_zero():
    batch = (torch.tensor([7]), torch.tensor([8]))  # one row, two workers: rank 1 takes it
    pieces, weights = {}, []
    for rank in (0, 1):
        sharded = ShardedBatches(FixedBatches([batch]), rank, 2, lambda *w: weights.append(w))
        [pieces[rank]] = list(sharded.epoch(0))
    assert [t.tolist() for t in pieces[0]] == [[7], [8]] and weights[0] == (0, 1)
    assert [t.tolist() for t in pieces[1]] == [[7], [8]] and weights[1] == (1, 1)


def test_batches_that_are_not_tensors_are_refused_in_one_line():
    sharded = ShardedBatches(FixedBatches([{"seeds": torch.arange(4)}]), 0, 2, lambda *w: None)
    with pytest.raises(TinyKGError, match="splits batches of tensors, not dict"):
        list(sharded.epoch(0))


def gradients(model, batch) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model.loss(*batch)
    loss.backward()
    return loss.detach(), [
        torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()
    ]


@pytest.mark.parametrize("model_name", ["bprmf", "lightgcn", "kgat", "kgcn", "kgin"])
@pytest.mark.parametrize("world_size", [2, 3])
def test_weighted_slice_gradients_add_up_to_the_whole_batch_gradient(
    tiny_dataset_dir, model_name, world_size
):
    """The claim the all-reduce rests on: every model's loss is a per-row mean plus terms that do not
    depend on the batch, so sum over workers of (rows_r / rows) * grad(loss of slice r) is the
    gradient (and loss) of the whole batch. No dropout or edge dropout: those draw per worker."""
    from kg_data import BPRBatches, KGDataset
    from tinykg_train.checkpoint import seed_everything
    from tinykg_train.models import build_model

    dataset = KGDataset.open(tiny_dataset_dir)
    config = TrainConfig(
        data=str(tiny_dataset_dir), model=model_name, embed_dim=8, n_layers=2, dropout=0.0,
        l2=1e-2, extra={"edge_dropout": 0.0} if model_name == "kgin" else {},
    )  # fmt: skip
    seed_everything(0)
    model = build_model(model_name, dataset, config).double()
    batch = next(iter(BPRBatches(dataset, 37, seed=3).epoch(0)))
    whole_loss, whole = gradients(model, batch)
    total_loss, total = torch.zeros((), dtype=torch.float64), [torch.zeros_like(g) for g in whole]
    for rank in range(world_size):
        shares = []
        sharded = ShardedBatches(
            FixedBatches([batch]), rank, world_size, lambda k, n, seen=shares: seen.append(k / n)
        )
        [piece] = list(sharded.epoch(0))
        loss, grads = gradients(model, piece)
        total_loss += shares[0] * loss
        total = [t + shares[0] * g for t, g in zip(total, grads, strict=True)]
    torch.testing.assert_close(total_loss, whole_loss, rtol=1e-12, atol=1e-12)
    for got, expected in zip(total, whole, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)


def _all_reduce_worker(rank: int, port: int, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        weight = torch.nn.Parameter(torch.zeros(3))
        unused = torch.nn.Parameter(torch.zeros(2))  # no gradient on either worker: left alone
        weight.grad = torch.full((3,), float(rank + 1))  # rank 0: 1, rank 1: 2
        loss = torch.tensor(10.0 * (rank + 1))
        share = (1 / 4, 3 / 4)[rank]
        global_loss = average_gradients([weight, unused], loss, share)
        results[rank] = (weight.grad.tolist(), unused.grad, float(global_loss))
    finally:
        dist.destroy_process_group()


def test_average_gradients_gives_every_worker_the_weighted_sum_over_a_gloo_group():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_all_reduce_worker, args=(port, results), nprocs=2, join=True)
        results = dict(results)
    expected = 1 / 4 * 1 + 3 / 4 * 2
    for rank in (0, 1):
        grad, unused_grad, loss = results[rank]
        assert grad == pytest.approx([expected] * 3)
        assert unused_grad is None
        assert loss == pytest.approx(1 / 4 * 10 + 3 / 4 * 20)
