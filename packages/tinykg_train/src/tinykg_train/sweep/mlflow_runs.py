"""The MLflow side of a sweep: one experiment, a parent run, one child run per trial.

The driver creates the experiment once (`tracking.ensure_experiment`: parallel trials creating it at
the same moment race on a fresh sqlite file) and the parent run; each trial's `MlflowTracker` then makes a child run carrying
`mlflow.parentRunId` plus the `sweep` and `sweep_trial` tags, so the MLflow UI groups the trials under
the parent and `tags.sweep = '<name>'` filters them. After Tune returns, the driver settles the
children a trial could not settle itself (its process was killed, or ASHA stopped it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tinykg_train.tracking import flatten_params, log_params

SWEEP_TAG = "sweep"  # the sweep's name, on the parent and every child
TRIAL_TAG = "sweep_trial"  # the Tune trial id, on every child
ROLE_TAG = "sweep_role"  # "parent" on the parent run
ERROR_TAG = "error"  # one line: why a trial failed
STOPPED_TAG = "stopped_by"  # "asha" on trials the scheduler stopped early

KILLED_MESSAGE = "the trial's process ended without a result (killed, e.g. out of memory)"


def client_for(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def start_parent_run(client, experiment_id: str, name: str, params: Mapping[str, Any]) -> str:
    """Create the sweep's parent run with the sweep settings as params; returns its id."""
    run = client.create_run(
        experiment_id, run_name=name, tags={SWEEP_TAG: name, ROLE_TAG: "parent"}
    )
    log_params(client, run.info.run_id, flatten_params(params))
    return run.info.run_id


def child_runs(client, experiment_id: str, parent_run_id: str) -> list:
    """Every trial run under the parent, oldest first."""
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
            max_results=1000,
            order_by=["attributes.start_time ASC"],
            page_token=token,
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


@dataclass(frozen=True)
class TrialOutcome:
    """How Tune saw one trial end: `done` (finished, or stopped by the scheduler), `error`, `unfinished`."""

    trial_id: str
    state: str
    error: str = ""
    params: dict[str, Any] = field(default_factory=dict)  # the trial's sampled settings


def settle_children(
    client, runs: Iterable, outcomes: Mapping[str, TrialOutcome], interrupted: bool
) -> dict[str, str]:
    """Close the child runs a trial could not close itself; returns {run_id: new status}.

    Tune saw the trial `done` but its run did not finish: ASHA stopped it (its worker may have been
    torn down before the trial marked the run), so KILLED with `stopped_by=asha`. Of the runs still
    RUNNING, a trial that errored lost its process (a kill, the OOM killer): FAILED with an `error`
    tag; on an interrupted sweep the unfinished ones become KILLED (`--resume` reopens them); any
    other is FAILED as well. An unfinished trial of an interrupted sweep whose run is FAILED was
    failed by the interruption itself (its worker torn down mid-epoch, which the trainer saw as an
    error, not a Ctrl-C): KILLED too, without that `error` tag.
    """
    settled = {}
    for run in runs:
        run_id, status, tags = run.info.run_id, run.info.status, run.data.tags
        outcome = outcomes.get(tags.get(TRIAL_TAG, ""))
        state = outcome.state if outcome is not None else "unfinished"
        if status == "FINISHED" or (status == "KILLED" and tags.get(STOPPED_TAG)):
            continue  # closed for good: trained, or already marked stopped
        if state == "done":
            client.set_tag(run_id, STOPPED_TAG, "asha")
            status = "KILLED"
        elif state == "unfinished" and interrupted and status in ("RUNNING", "FAILED"):
            if ERROR_TAG in tags:
                client.delete_tag(run_id, ERROR_TAG)
            status = "KILLED"
        elif status != "RUNNING":
            continue  # the trial closed its run itself (a failure it recorded)
        else:
            detail = f": {outcome.error}" if outcome is not None and outcome.error else ""
            client.set_tag(run_id, ERROR_TAG, (KILLED_MESSAGE + detail)[:500])
            status = "FAILED"
        client.set_terminated(run_id, status=status)
        settled[run_id] = status
    return settled


def error_line(exc: BaseException) -> str:
    """`Type: message`, first line only, short enough for a tag."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")[:500]
