"""memory_breakdown: a step's peak split into parts that sum to it, each part counted from the
tensors it names or measured independently, and moving the right way with bits and embed_dim."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tinykg_train.compress import compress_saved_tensors
from tinykg_train.config import TrainConfig
from tinykg_train.epoch import run_phase
from tinykg_train.memory import allocation_peak
from tinykg_train.memory_breakdown import (
    EPOCH_START,
    EVALUATION,
    HELD_PARTS,
    STEP_PARTS,
    breakdown_metrics,
    epoch_start_measured,
    evaluate_measured,
    optimizer_state_bytes,
    run_peak,
    summary_rows,
)
from tinykg_train.session import open_session
from tinykg_train.trainer import train


class SameBatch:
    """A batches object yielding one pre-drawn batch `steps` times per epoch."""

    def __init__(self, batch, steps: int) -> None:
        self.batch, self.steps = list(batch), steps

    def __len__(self) -> int:
        return self.steps

    def epoch(self, epoch: int):
        return iter([self.batch] * self.steps)


def config(data: Path, out: Path, **overrides) -> TrainConfig:
    settings = dict(
        data=str(data), out=str(out), model="kgat", bits=2, epochs=1, embed_dim=16, n_layers=2,
        batch_size=128, kg_batch_size=128, max_batches_per_epoch=2, device="cpu", seed=0,
    )  # fmt: skip
    return TrainConfig(**{**settings, **overrides})


def test_a_steps_parts_sum_to_its_peak_which_an_independent_window_measures(
    tiny_dataset_dir, tmp_path
):
    session = open_session(config(tiny_dataset_dir, tmp_path / "run"), torch.device("cpu"))
    model = session.model
    model.train()
    model.on_epoch_start(0)
    batch = SameBatch(next(iter(session.cf_batches.epoch(0))), steps=2)
    _, activation_bytes, _ = run_phase(session, 0, "cf", batch, model.loss, measure=True)
    row = session.state.memory_breakdown["cf"]
    assert row["peak"] == sum(row[name] for name in STEP_PARTS)
    assert (row["epoch"], row["step"], row["optimizer_state_made_in_step"]) == (0, 1, 0)
    assert row["embedding_tables"] == model.node_embedding.numel() * 4
    assert row["graph_buffers"] == sum(b.numel() * b.element_size() for b in model.buffers())
    assert row["optimizer_state"] == optimizer_state_bytes(session.optimizer)
    trained = [p for p in model.parameters() if p.grad is not None]
    assert row["gradients"] == sum(p.numel() * 4 for p in trained)  # the CF phase's parameters
    assert row["activations"] == activation_bytes  # step 1's, counted as step 0's are
    # the same step again (Adam state present, as in the measured one), in a window of its own
    session.optimizer.zero_grad(set_to_none=True)
    with allocation_peak(torch.device("cpu")) as window:
        with compress_saved_tensors(session.compression):
            model.loss(*batch.batch).backward()
        session.optimizer.step()
    held = sum(row[name] for name in STEP_PARTS[:4])
    assert row["peak"] - held == pytest.approx(window.peak_bytes, rel=0.01)


def test_activations_fall_with_bits_and_tables_and_adam_state_grow_with_embed_dim(
    tiny_dataset_dir, tmp_path
):
    runs = {
        (bits, dim): train(
            config(tiny_dataset_dir, tmp_path / f"{bits}-{dim}", bits=bits, embed_dim=dim)
        )
        for bits, dim in ((32, 16), (2, 16), (2, 32))
    }
    fp32, int2, wide = (runs[key]["memory_breakdown"] for key in ((32, 16), (2, 16), (2, 32)))
    for breakdown in (fp32, int2, wide):
        for phase in ("cf", "kg"):
            assert breakdown[phase]["peak"] == sum(breakdown[phase][n] for n in STEP_PARTS)
    assert int2["cf"]["activations"] * 4 < fp32["cf"]["activations"]
    assert int2["cf"]["activations"] == runs[(2, 16)]["activation_bytes"]  # the same count
    assert int2["cf"]["peak"] < fp32["cf"]["peak"]
    for part in ("embedding_tables", "optimizer_state"):
        assert int2["cf"][part] == fp32["cf"][part]  # bits change neither
    # compressed, KGAT's layers push gradients back a block of rows at a time: no transposed CSR
    assert int2["cf"]["graph_buffers"] < fp32["cf"]["graph_buffers"]
    assert wide["cf"]["embedding_tables"] == 2 * int2["cf"]["embedding_tables"]
    assert wide["kg"]["optimizer_state"] > 1.9 * int2["kg"]["optimizer_state"]
    assert wide["cf"]["graph_buffers"] == int2["cf"]["graph_buffers"]


def test_evaluation_breakdown_is_the_held_parts_and_its_larger_stage(tiny_dataset_dir, tmp_path):
    session = open_session(config(tiny_dataset_dir, tmp_path / "run"), torch.device("cpu"))
    metrics = evaluate_measured(session, "valid")
    row = session.state.memory_breakdown[EVALUATION]
    working = max(row["propagation"], row["scoring_cache"] + row["score_blocks"])
    assert row["peak"] == sum(row[n] for n in HELD_PARTS) + working
    assert row["gradients"] == 0  # nothing trained yet
    session.model.eval()
    ranked = torch.from_numpy(session.evaluator.users("valid"))  # the ranking keeps only theirs
    session.model.prepare_scoring(users=ranked)
    user_rows, item_rows = session.model._scoring  # what prepare_scoring keeps
    session.model.train()
    assert row["scoring_cache"] >= (user_rows.numel() + item_rows.numel()) * 4
    assert row["score_blocks"] > 0
    assert evaluate_measured(session, "valid") == metrics  # measured once, same numbers
    assert session.state.memory_breakdown[EVALUATION] is row


def test_a_resumed_run_keeps_the_breakdown_its_first_epoch_measured(tiny_dataset_dir, tmp_path):
    first = config(tiny_dataset_dir, tmp_path / "run", epochs=1)
    measured = train(first)["memory_breakdown"]
    resumed = train(first.with_overrides(epochs=2, resume=True))
    assert resumed["memory_breakdown"] == measured
    assert set(measured) == {"cf", "kg", EVALUATION, EPOCH_START}  # KGAT refreshes its attention


def test_the_epoch_start_hook_is_measured_once_and_only_when_it_allocates(
    tiny_dataset_dir, tmp_path
):
    session = open_session(config(tiny_dataset_dir, tmp_path / "run"), torch.device("cpu"))
    with allocation_peak(torch.device("cpu")) as independent:
        session.model.on_epoch_start(0)
    epoch_start_measured(session, 0)
    row = session.state.memory_breakdown[EPOCH_START]
    edges = session.model.num_edges  # whole-graph: the scores are a temporary of the refresh
    assert row["work"] == independent.peak_bytes and row["work"] >= edges * 4  # the edges' scores
    assert row["peak"] == sum(row[n] for n in HELD_PARTS) + row["work"]
    epoch_start_measured(session, 1)
    assert session.state.memory_breakdown[EPOCH_START] is row  # measured once
    assert dict(summary_rows({EPOCH_START: row}))["epoch_start peak MiB"].count("work") == 1
    quiet = open_session(
        config(tiny_dataset_dir, tmp_path / "lightgcn", model="lightgcn"), torch.device("cpu")
    )
    epoch_start_measured(quiet, 0)  # LightGCN's hook allocates nothing: no row
    assert EPOCH_START not in quiet.state.memory_breakdown


def test_metrics_and_summary_name_every_part_and_the_largest_peak():
    breakdown = {
        "cf": {**{n: 2**20 for n in STEP_PARTS}, "peak": 7 * 2**20, "epoch": 0, "step": 1},
        EVALUATION: {**{n: 2**20 for n in HELD_PARTS}, "propagation": 9 * 2**20,
                     "scoring_cache": 2**20, "score_blocks": 2**20, "peak": 14 * 2**20,
                     "peak_stage": "propagation"},
    }  # fmt: skip
    metrics = breakdown_metrics(breakdown)
    assert metrics["memory_cf_activations"] == 2**20 and "memory_cf_epoch" not in metrics
    assert metrics["memory_peak"] == 14 * 2**20
    assert run_peak(breakdown) == (EVALUATION, 14 * 2**20)
    rows = dict(summary_rows(breakdown))
    assert rows["evaluation peak MiB"].startswith("14 (propagation 9, ")
    assert rows["cf peak MiB"].startswith("7 (")
    assert summary_rows({}) == [] and run_peak({}) == (None, None)


def test_a_step_that_raises_leaves_no_profiler_running(tiny_dataset_dir, tmp_path):
    session = open_session(config(tiny_dataset_dir, tmp_path / "run"), torch.device("cpu"))

    def failing(*batch):
        raise RuntimeError("boom")

    batch = SameBatch(next(iter(session.cf_batches.epoch(0))), steps=2)
    with pytest.raises(RuntimeError, match="boom"):
        run_phase(session, 0, "cf", SameBatch(batch.batch, 1), failing, measure=False)
    with allocation_peak(torch.device("cpu")) as window:  # would raise if a profiler still ran
        torch.ones(1000)
    assert window.peak_bytes >= 4000
