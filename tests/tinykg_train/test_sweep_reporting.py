"""Epoch reports to Tune: what is sent, the last epoch held back until training finished, and a
scheduler's stop (Tune raises SystemExit inside `tune.report`) turned into `StoppedByScheduler`."""

from __future__ import annotations

import pytest

from tinykg_train.sweep.reporting import StoppedByScheduler, TuneReporter, tune_metrics


def test_tune_metrics_keep_finite_numbers_and_counts_epochs_from_one():
    report = {
        "epoch": 0,
        "train_loss": 0.69,
        "recall@20": 0.1,
        "ndcg@20": 0.05,
        "activation_bytes": 1024,
        "best_recall@20": float("-inf"),
        "eval_seconds": None,
        "stopped_early": False,
        "best_epoch": 0,
    }
    assert tune_metrics(report) == {
        "epoch": 1,
        "train_loss": 0.69,
        "recall@20": 0.1,
        "ndcg@20": 0.05,
        "activation_bytes": 1024.0,
        "best_epoch": 0.0,
    }


def test_no_report_before_the_first_evaluation():
    # schedulers need valid recall@20 in every result, so epochs before it are not reported
    assert tune_metrics({"epoch": 0, "train_loss": 0.7}) is None


def epoch(n, recall=0.1, **extra):
    return {"epoch": n, "train_loss": 0.5, "recall@20": recall, "ndcg@20": recall / 2, **extra}


def test_the_last_epoch_is_sent_after_training_with_the_test_metrics():
    sent = []
    reporter = TuneReporter(epochs=3, report=sent.append)
    for n in range(3):
        reporter.on_epoch(epoch(n, recall=0.1 * (n + 1)))
    assert [m["epoch"] for m in sent] == [1, 2]  # epoch 3 waits for the end of training
    reporter.final({"recall@20": 0.25, "ndcg@20": 0.125, "model": "kgat", "best_valid": {}})
    assert sent[-1]["epoch"] == 3 and sent[-1]["recall@20"] == pytest.approx(0.3)
    assert (sent[-1]["test_recall@20"], sent[-1]["test_ndcg@20"]) == (0.25, 0.125)


def test_early_stopping_by_the_trainer_also_holds_the_report_back():
    sent = []
    reporter = TuneReporter(epochs=10, report=sent.append)
    reporter.on_epoch(epoch(0))
    reporter.on_epoch(epoch(1, stopped_early=True))
    assert [m["epoch"] for m in sent] == [1]
    reporter.final({"recall@20": 0.2})
    assert [m["epoch"] for m in sent] == [1, 2]


def test_a_run_resumed_after_its_last_epoch_reports_its_best_valid_metrics():
    sent = []
    reporter = TuneReporter(epochs=2, report=sent.append)
    reporter.final(
        {"recall@20": 0.2, "best_valid": {"recall@20": 0.3, "ndcg@20": 0.1}, "epochs_trained": 2}
    )
    assert sent == [{"recall@20": 0.3, "ndcg@20": 0.1, "epoch": 2, "test_recall@20": 0.2}]


def test_a_stop_from_tune_becomes_stopped_by_scheduler_and_a_late_one_is_ignored():
    def stop(metrics):
        raise SystemExit(0)

    reporter = TuneReporter(epochs=3, report=stop)
    with pytest.raises(StoppedByScheduler, match="after epoch 1"):
        reporter.on_epoch(epoch(0))
    reporter.on_epoch(epoch(2))  # held back: no report, no stop
    reporter.final({"recall@20": 0.2})  # the stop on the final result is swallowed
