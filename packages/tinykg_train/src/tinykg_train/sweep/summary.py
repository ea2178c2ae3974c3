"""The end-of-sweep table: one row per trial, read back from the trials' MLflow runs.

MLflow is the one place every trial reports to (on a cluster the run dirs live on other nodes), so
the table shows exactly what the UI compares: test Recall@20 / NDCG@20 of the best epoch, the bytes
autograd held for backward in one step (after compression) and the mean epoch time.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tinykg_train.sweep.mlflow_runs import ERROR_TAG, STOPPED_TAG, TRIAL_TAG
from tinykg_train.sweep.pareto import pareto_front

BASE_COLUMNS = ("trial", "model", "bits", "lr", "seed")


@dataclass
class TrialRow:
    """One trial's outcome as the summary shows it."""

    trial: str
    run_id: str
    status: str  # FINISHED, FAILED, STOPPED (ASHA), KILLED (interrupted)
    settings: dict[str, str]  # model, bits, lr, seed and any other swept setting (MLflow params)
    recall: float | None = None  # test recall@20
    ndcg: float | None = None  # test ndcg@20
    popular: float | None = None  # the most-popular ranking's test recall@20 on the trial's users
    activation_bytes: float | None = None
    epoch_seconds: float | None = None  # mean over the trained epochs
    error: str = ""
    pareto: bool = False

    @property
    def activation_mib(self) -> float | None:
        return None if self.activation_bytes is None else self.activation_bytes / 2**20

    @property
    def comparable(self) -> bool:
        """Finished with the numbers the Pareto chart needs."""
        return (
            self.status == "FINISHED"
            and self.recall is not None
            and self.activation_bytes is not None
            and math.isfinite(self.recall)
        )


def row_from_run(client, run, swept: Sequence[str]) -> TrialRow:
    """A TrialRow from a child run (one extra query for the per-epoch seconds)."""
    data, info = run.data, run.info
    status = info.status
    if status == "KILLED" and data.tags.get(STOPPED_TAG):
        status = "STOPPED"
    seconds = [m.value for m in client.get_metric_history(info.run_id, "epoch_seconds")]
    names = [*BASE_COLUMNS[1:], *(s for s in swept if s not in BASE_COLUMNS)]
    final = data.metrics if status == "FINISHED" else {}  # the test metrics of a finished trial
    return TrialRow(
        trial=data.tags.get(TRIAL_TAG, info.run_id[:8]),
        run_id=info.run_id,
        status=status,
        settings={name: data.params.get(name, "") for name in names},
        recall=final.get("test_recall_at_20"),
        ndcg=final.get("test_ndcg_at_20"),
        popular=final.get("test_most_popular_recall_at_20"),
        activation_bytes=data.metrics.get("activation_bytes"),
        epoch_seconds=sum(seconds) / len(seconds) if seconds else None,
        error=data.tags.get(ERROR_TAG, ""),
    )


def mark_pareto(rows: Sequence[TrialRow]) -> list[TrialRow]:
    """Flag the rows on the memory/recall Pareto front; returns them, least memory first."""
    comparable = [row for row in rows if row.comparable]
    front = pareto_front([r.activation_bytes for r in comparable], [r.recall for r in comparable])
    for index in front:
        comparable[index].pareto = True
    return [comparable[index] for index in front]


def _cell(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def table_rows(rows: Iterable[TrialRow]) -> tuple[list[str], list[list[str]]]:
    rows = list(rows)
    setting_names = list(rows[0].settings) if rows else list(BASE_COLUMNS[1:])
    header = [
        "trial",
        *setting_names,
        "status",
        "recall@20",
        "ndcg@20",
        "popular@20",
        "activation MiB",
        "epoch s",
        "pareto",
    ]
    body = [
        [
            row.trial,
            *(row.settings.get(name, "") for name in setting_names),
            row.status,
            _cell(row.recall, 4),
            _cell(row.ndcg, 4),
            _cell(row.popular, 4),
            _cell(row.activation_mib, 3),
            _cell(row.epoch_seconds, 2),
            "*" if row.pareto else "",
        ]
        for row in rows
    ]
    return header, body


def format_table(rows: Sequence[TrialRow]) -> str:
    """A plain-text table (right-aligned numbers), then one line per failed trial with its error."""
    header, body = table_rows(rows)
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *body, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for cells in body:
        lines.append(
            "  ".join(
                c.rjust(w) if _numeric(c) else c.ljust(w)
                for c, w in zip(cells, widths, strict=True)
            ).rstrip()
        )
    for row in rows:
        if row.status == "FAILED":
            lines.append(f"failed {row.trial}: {row.error or 'no error recorded'}")
    return "\n".join(lines)


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def write_csv(path: Path, rows: Sequence[TrialRow]) -> Path:
    header, body = table_rows(rows)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*header, "mlflow_run_id", "error"])
        for row, cells in zip(rows, body, strict=True):
            writer.writerow([*cells, row.run_id, row.error])
    return path
