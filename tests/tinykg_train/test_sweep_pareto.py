"""The memory/Recall@20 Pareto front against a brute-force reference, and the chart drawn from it."""

from __future__ import annotations

import random

import pytest

from tinykg_train.sweep.pareto import pareto_chart, pareto_front, popularity_line, trial_width
from tinykg_train.sweep.summary import TrialRow, mark_pareto


def brute_force_front(memory, quality):
    """Every point that no other point dominates (at most the memory, at least the quality, one strictly)."""

    def dominates(j, i):
        no_worse = memory[j] <= memory[i] and quality[j] >= quality[i]
        better = memory[j] < memory[i] or quality[j] > quality[i]
        return no_worse and better

    n = len(memory)
    return {i for i in range(n) if not any(dominates(j, i) for j in range(n) if j != i)}


def test_hand_made_case():
    memory = [10, 10, 5, 5, 1, 20, 1]
    quality = [0.5, 0.4, 0.5, 0.5, 0.1, 0.9, 0.05]
    # 2 and 3 are identical and both stay; 0 has more memory than 2 at the same quality; 1 and 6 lose
    assert pareto_front(memory, quality) == [4, 2, 3, 5]


@pytest.mark.parametrize("seed", range(20))
def test_matches_brute_force_on_random_points_with_ties(seed):
    rng = random.Random(seed)
    n = rng.randint(0, 40)
    # a coarse grid makes equal memories, equal qualities and exact duplicates common
    memory = [rng.randint(1, 8) * 0.5 for _ in range(n)]
    quality = [rng.randint(0, 6) / 6 for _ in range(n)]
    front = pareto_front(memory, quality)
    assert set(front) == brute_force_front(memory, quality)
    assert len(front) == len(set(front))
    assert [memory[i] for i in front] == sorted(memory[i] for i in front)


def test_a_front_that_ignores_ties_would_fail_the_reference():
    """Control: a front keeping only strictly better quality drops duplicates the reference keeps."""
    memory, quality = [1.0, 1.0, 2.0], [0.5, 0.5, 0.7]

    def strict_only(memory, quality):
        best, kept = float("-inf"), []
        for i in sorted(range(len(memory)), key=lambda i: (memory[i], -quality[i])):
            if quality[i] > best:
                kept.append(i)
                best = quality[i]
        return kept

    assert set(strict_only(memory, quality)) != brute_force_front(memory, quality)
    assert set(pareto_front(memory, quality)) == brute_force_front(memory, quality)


def test_lengths_must_match():
    with pytest.raises(ValueError, match="same length"):
        pareto_front([1.0], [])


def row(trial, model, bits, status="FINISHED", recall=0.1, mb=1.0, popular=None):
    return TrialRow(
        trial=trial,
        run_id=f"run-{trial}",
        status=status,
        settings={"model": model, "bits": str(bits), "lr": "0.001", "seed": "0"},
        recall=recall if status == "FINISHED" else None,
        ndcg=0.05 if status == "FINISHED" else None,
        popular=popular,
        activation_bytes=mb * 2**20,
        epoch_seconds=0.5,
    )


def test_mark_pareto_skips_failed_rows_and_the_chart_is_written(tmp_path):
    rows = [
        row("a", "kgat", 2, recall=0.30, mb=1.0),
        row("b", "kgat", 32, recall=0.31, mb=12.0),
        row("c", "lightgcn", 4, recall=0.25, mb=2.0),  # dominated by a
        row("d", "lightgcn", 2, status="FAILED"),
    ]
    front = mark_pareto(rows)
    assert [r.trial for r in front] == ["a", "b"]
    assert [r.pareto for r in rows] == [True, True, False, False]
    path = pareto_chart(rows, tmp_path / "pareto.png", "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_no_chart_without_a_finished_trial(tmp_path):
    assert pareto_chart([row("d", "kgat", 2, status="FAILED")], tmp_path / "p.png", "t") is None
    assert not (tmp_path / "p.png").exists()


def test_adaptive_widths_and_memory_budgets_get_their_own_labels_on_the_chart(tmp_path):
    assert trial_width({"bits": "32"}) == "fp32" and trial_width({"bits": "2"}) == "int2"
    assert trial_width({"bits": "auto", "memory_budget": "None"}) == "auto"
    assert trial_width({"bits": "auto", "memory_budget": "300MB"}) == "auto <= 300MB"
    rows = [row("a", "kgat", 32, recall=0.31, mb=12.0), row("b", "kgat", "auto", recall=0.30)]
    rows.append(row("c", "kgat", "auto", recall=0.29, mb=0.5))
    rows[2].settings["memory_budget"] = "30MB"
    mark_pareto(rows)
    assert pareto_chart(rows, tmp_path / "p.png", "auto").stat().st_size > 10_000


def test_the_most_popular_line_is_drawn_only_when_every_trial_shares_it(tmp_path):
    same = [row("a", "kgat", 2, recall=0.3, popular=0.2), row("b", "kgat", 32, popular=0.2)]
    assert popularity_line(same) == 0.2
    assert popularity_line([*same, row("c", "kgin", 2, popular=0.25)]) is None  # other users/data
    assert popularity_line([*same, row("c", "kgin", 2)]) is None  # a run from before it was logged
    mark_pareto(same)
    with_line = pareto_chart(same, tmp_path / "line.png", "t").read_bytes()
    for point in same:
        point.popular = None
    assert pareto_chart(same, tmp_path / "none.png", "t").read_bytes() != with_line
