"""The MLflow side of a sweep: one experiment, a parent run, one child run per trial.

The driver creates the experiment once (parallel trials creating it at the same moment race on a
fresh sqlite file) and the parent run; each trial's `MlflowTracker` then makes a child run carrying
`mlflow.parentRunId` plus the `sweep` and `sweep_trial` tags, so the MLflow UI groups the trials under
the parent and `tags.sweep = '<name>'` filters them. After Tune returns, the driver settles the
children a trial could not settle itself (its process was killed, or ASHA stopped it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tinykg_train.tracking import flatten_params, sqlite_path

SWEEP_TAG = "sweep"  # the sweep's name, on the parent and every child
TRIAL_TAG = "sweep_trial"  # the Tune trial id, on every child
ROLE_TAG = "sweep_role"  # "parent" on the parent run
ERROR_TAG = "error"  # one line: why a trial failed
STOPPED_TAG = "stopped_by"  # "asha" on trials the scheduler stopped early

KILLED_MESSAGE = "the trial's process ended without a result (killed, e.g. out of memory)"


def client_for(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def ensure_experiment(client, name: str, tracking_uri: str) -> str:
    """The id of experiment `name`, created (artifacts beside a sqlite database) when missing."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage == "deleted":
            client.restore_experiment(found.experiment_id)
        return found.experiment_id
    db = sqlite_path(tracking_uri)
    location = str(db.parent / "mlruns" / name) if db is not None else None
    return client.create_experiment(name, artifact_location=location)


def start_parent_run(client, experiment_id: str, name: str, params: Mapping[str, Any]) -> str:
    """Create the sweep's parent run with the sweep settings as params; returns its id."""
    from mlflow.entities import Param

    run = client.create_run(
        experiment_id, run_name=name, tags={SWEEP_TAG: name, ROLE_TAG: "parent"}
    )
    items = [Param(k, v[:6000]) for k, v in flatten_params(params).items()]
    for start in range(0, len(items), 100):  # at most 100 params per batch
        client.log_batch(run.info.run_id, params=items[start : start + 100])
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


def settle_children(
    client, runs: Iterable, stopped_trial_ids: set[str], interrupted: bool
) -> dict[str, str]:
    """Close the child runs still RUNNING after Tune returned; returns {run_id: new status}.

    A trial ASHA stopped early (its Tune status is TERMINATED) becomes KILLED with `stopped_by=asha`;
    on an interrupted sweep the unfinished ones become KILLED (`--resume` reopens them); any other
    RUNNING run lost its process (a kill, the OOM killer) and becomes FAILED with an `error` tag.
    """
    settled = {}
    for run in runs:
        if run.info.status != "RUNNING":
            continue
        run_id, trial_id = run.info.run_id, run.data.tags.get(TRIAL_TAG)
        if trial_id in stopped_trial_ids:
            client.set_tag(run_id, STOPPED_TAG, "asha")
            status = "KILLED"
        elif interrupted:
            status = "KILLED"
        else:
            client.set_tag(run_id, ERROR_TAG, KILLED_MESSAGE)
            status = "FAILED"
        client.set_terminated(run_id, status=status)
        settled[run_id] = status
    return settled


def error_line(exc: BaseException) -> str:
    """`Type: message`, first line only, short enough for a tag."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")[:500]
