"""MLflow tracking of a training run: params, per-epoch metrics, artifacts, tags and the run status.

`MlflowTracker` talks to the store through `MlflowClient` with explicit run ids (no fluent "active
run" global), so a sweep can nest trial runs under a parent and several trackers can live in one
process. The trainer drives it:

    tracker.start(config, run_dir, device_label)   # creates (or, on --resume, reopens) the run
    tracker.log_epoch(epoch, row)                  # every epoch: train_loss, recall_at_20, ...
    tracker.finish(result, run_dir)                # test metrics, artifacts, what ran, FINISHED
    tracker.fail(status)                           # training raised: FAILED (or KILLED), then re-raise

Tracking URI: the `tracking_uri` argument, else `MLFLOW_TRACKING_URI`, else `sqlite:///<cwd>/mlflow.db`
(made absolute so a trial that changes its working directory still writes to the same store). With a
sqlite store a new experiment keeps its artifacts in `mlruns/<experiment>` beside the database file.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import warnings
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from tinykg_train.compression_defaults import width_label
from tinykg_train.errors import TinyKGError
from tinykg_train.run_dir import RunDir, write_json_atomic
from tinykg_train.runtime import record_tags

PACKAGES = ("tinykg-train", "tinykg-kernels", "kg-data", "torch", "triton")


class Tracker(Protocol):
    """What `trainer.train` calls on a tracker."""

    def start(self, config, run_dir: RunDir, device_label: str) -> None: ...
    def log_epoch(self, epoch: int, metrics: Mapping[str, Any]) -> None: ...
    def finish(self, result: Mapping[str, Any], run_dir: RunDir) -> None: ...
    def fail(self, status: str = "FAILED") -> None: ...


# -- naming helpers -------------------------------------------------------------------------------


def metric_key(name: str) -> str:
    """MLflow-safe metric name: "recall@20" -> "recall_at_20"."""
    return name.replace("@", "_at_")


def flatten_params(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested dicts become dotted keys ("extra.alpha"); values become strings (lists as "[20, 50]")."""
    flat: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, prefix=f"{name}."))
        else:
            flat[name] = str(list(value) if isinstance(value, tuple) else value)
    return flat


def numeric_metrics(values: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The int/float entries of `values` (bools and None skipped), with MLflow-safe names."""
    return {
        prefix + metric_key(key): float(value)
        for key, value in values.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def default_tracking_uri() -> str:
    """`MLFLOW_TRACKING_URI` if set, else an absolute `sqlite:///<cwd>/mlflow.db`."""
    return (
        os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"
    )


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///path` URI, else None."""
    prefix = "sqlite:///"
    return Path(uri[len(prefix) :]) if uri.startswith(prefix) else None


def absolute_uri(uri: str) -> str:
    """A sqlite URI with a relative path made absolute (against the current directory); others as given."""
    path = sqlite_path(uri)
    if path is None or path.is_absolute():
        return uri
    return f"sqlite:///{Path.cwd().resolve() / path}"


@contextlib.contextmanager
def store_errors(
    tracking_uri: str, fix: str = "fix --tracking-uri / MLFLOW_TRACKING_URI"
) -> Iterator[None]:
    """Turn a tracking store that cannot be opened or written into a one-line TinyKGError."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except (MlflowException, SQLAlchemyError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TinyKGError(f"MLflow store {tracking_uri}: {first[:300]}; {fix}") from None


def ensure_experiment(client, name: str, tracking_uri: str) -> str:
    """The id of experiment `name`: restored if deleted, created when missing (artifacts beside a
    sqlite database); another process creating it at the same moment is fine."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is None:
        db = sqlite_path(tracking_uri)
        location = str(db.parent / "mlruns" / name) if db is not None else None
        try:
            return client.create_experiment(name, artifact_location=location)
        except MlflowException:  # created meanwhile by another process (parallel trials)
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    if found.lifecycle_stage == "deleted":  # runs cannot be created in a deleted experiment
        client.restore_experiment(found.experiment_id)
    return found.experiment_id


def log_params(client, run_id: str, params: Mapping[str, str]) -> None:
    """Log string params, values cut to 6000 characters, in batches of 100 (MLflow's limits)."""
    from mlflow.entities import Param

    items = [Param(key, value[:6000]) for key, value in params.items()]
    for start in range(0, len(items), 100):
        client.log_batch(run_id, params=items[start : start + 100])


def chosen_width_params(precision: Mapping[str, Any]) -> dict[str, str]:
    """`bits: auto`'s latest plans as params, keyed by the epoch each was measured at (params never
    change, and a resumed run may measure again): `bits_chosen.<phase>.epoch<E>.<module>` = its
    sites' widths in order ("4,2"), `bits_chosen.<phase>.epoch<E>.average` = the average width."""
    params: dict[str, str] = {}
    for phase, plan in precision["phases"].items():
        prefix = f"bits_chosen.{phase}.epoch{plan['epoch']}"
        widths: dict[str, list[str]] = {}
        for site in plan["sites"]:
            widths.setdefault(site["module"] or "model", []).append(str(site["bits"]))
        params.update({f"{prefix}.{m}": ",".join(w) for m, w in widths.items()})
        params[f"{prefix}.average"] = f"{plan['average_bits']:.2f}"
    return params


def git_commit(cwd: Path | None = None) -> tuple[str, bool] | None:
    """(commit sha, dirty?) of the git checkout around `cwd`, or None outside a repository."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        if sha.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return sha.stdout.strip(), bool(status.stdout.strip())


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


# -- the tracker ----------------------------------------------------------------------------------


class MlflowTracker:
    """One MLflow run per training run (see the module docstring for the call sequence)."""

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment: str = "tinykg",
        run_name: str | None = None,
        tags: Mapping[str, Any] | None = None,
        parent_run_id: str | None = None,
        experiment_id: str | None = None,
    ) -> None:
        self.tracking_uri = absolute_uri(tracking_uri or default_tracking_uri())
        self.experiment = experiment
        self.run_name = run_name
        self.tags = {key: str(value) for key, value in (tags or {}).items()}
        self.parent_run_id = parent_run_id
        self.experiment_id = experiment_id
        self.run_id: str | None = None
        self._client = None

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, config, run_dir: RunDir, device_label: str) -> None:
        """Create the run (or reopen the one `run_dir` logged to, when resuming) and log params/tags.

        A store that cannot be opened is a TinyKGError (one line: the URI and how to fix it).
        """
        fix = "fix --tracking-uri / MLFLOW_TRACKING_URI or pass --no-mlflow"
        with store_errors(self.tracking_uri, fix):
            self._start(config, run_dir, device_label)

    def _start(self, config, run_dir: RunDir, device_label: str) -> None:
        reopened = self._reopen(run_dir) if config.resume else None
        if reopened is not None:
            self.run_id = reopened
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            experiment_id = self.experiment_id or ensure_experiment(
                self.client, self.experiment, self.tracking_uri
            )
            self.experiment_id = experiment_id
            run = self.client.create_run(
                experiment_id,
                run_name=self.run_name
                or f"{config.model}-{width_label(config.bits)}-seed{config.seed}",
                tags=self._run_tags(config, device_label),
            )
            self.run_id = run.info.run_id
            write_json_atomic(
                run_dir.mlflow_run,
                {
                    "tracking_uri": self.tracking_uri,
                    "run_id": self.run_id,
                    "experiment_id": experiment_id,
                },
            )
        self._log_params(config, skip_existing=reopened is not None)
        if reopened is not None:
            self.client.set_tag(self.run_id, "resumed", "true")

    def log_epoch(self, epoch: int, metrics: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        values = numeric_metrics({k: v for k, v in metrics.items() if k != "epoch"})
        self.client.log_batch(
            self._require_run(),
            metrics=[Metric(key, value, stamp, int(epoch)) for key, value in values.items()],
        )

    def finish(self, result: Mapping[str, Any], run_dir: RunDir) -> None:
        """Log the final (test) metrics, the run dir's artifacts and what ran (`runtime.record_tags`);
        mark the run FINISHED."""
        from mlflow.entities import Metric, RunTag

        run_id = self._require_run()
        stamp = int(time.time() * 1000)
        final = numeric_metrics(
            {k: v for k, v in result.items() if k.startswith(("recall@", "ndcg@"))}, prefix="test_"
        )
        final.update(numeric_metrics(result.get("most_popular") or {}, prefix="test_most_popular_"))
        for key in (
            "best_epoch",
            "activation_bytes",
            "peak_rss_bytes",
            "cuda_max_memory_allocated",
            "epochs_trained",
        ):
            if isinstance(result.get(key), (int, float)):
                final[key] = float(result[key])
        from tinykg_train.memory_breakdown import breakdown_metrics

        final.update(breakdown_metrics(result.get("memory_breakdown") or {}))
        # and, as tags, what ran: kernel backends per op, their version and library, torch threads
        tags = [RunTag(key, value) for key, value in record_tags(result).items()]
        metrics = [Metric(k, v, stamp, 0) for k, v in final.items()]
        self.client.log_batch(run_id, metrics=metrics, tags=tags)
        if result.get("precision"):
            log_params(self.client, run_id, chosen_width_params(result["precision"]))
        for path in (
            run_dir.config,
            run_dir.metrics,
            run_dir.activation_table,
            run_dir.activation_chart,
        ):
            if path.is_file():
                self.client.log_artifact(run_id, str(path))
        self.client.set_terminated(run_id, status="FINISHED")

    def attach(self, run_dir: RunDir) -> bool:
        """Take over the run `run_dir` logged to (another process created it, e.g. rank 0 of a
        data-parallel run); False when it recorded none in this tracker's store."""
        self.run_id = self._reopen(run_dir)
        return self.run_id is not None

    def fail(self, status: str = "FAILED") -> None:
        """Mark the run FAILED (or KILLED); never raises, so the training's own error propagates."""
        if self.run_id is None:
            return
        try:
            self.client.set_terminated(self.run_id, status=status)
        except Exception as exc:  # the store itself may be what failed
            warnings.warn(f"could not mark MLflow run {self.run_id} {status}: {exc}", stacklevel=2)

    # -- internals ---------------------------------------------------------------------------------

    def _require_run(self) -> str:
        if self.run_id is None:
            raise RuntimeError("MlflowTracker.start() must be called before logging")
        return self.run_id

    def _reopen(self, run_dir: RunDir) -> str | None:
        """The run id recorded in `run_dir` if it lives in this tracker's store, else None."""
        from mlflow.exceptions import MlflowException

        try:
            recorded = json.loads(run_dir.mlflow_run.read_text())
        except (OSError, ValueError):
            return None
        if recorded.get("tracking_uri") != self.tracking_uri or not recorded.get("run_id"):
            return None
        try:
            self.client.get_run(recorded["run_id"])
        except MlflowException:
            return None
        return recorded["run_id"]

    def _run_tags(self, config, device_label: str) -> dict[str, str]:
        tags = {
            "model": config.model,
            "bits": str(config.bits),
            "seed": str(config.seed),
            "device": device_label,
            "torch_threads": str(_torch_threads()),
            "dataset": str(Path(config.data).resolve()) if config.data else "",
            **{f"version.{name}": version for name, version in package_versions().items()},
        }
        commit = git_commit(Path(__file__).resolve().parent)  # this checkout, wherever the cwd is
        if commit is not None:
            sha, dirty = commit
            tags.update(
                {
                    "mlflow.source.git.commit": sha,
                    "git_commit": sha,
                    "git_dirty": str(dirty).lower(),
                }
            )
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        tags.update(self.tags)
        return tags

    def _log_params(self, config, skip_existing: bool) -> None:
        params = flatten_params(config.to_dict())
        if skip_existing:  # params are immutable in MLflow; a resumed run keeps its original ones
            existing = self.client.get_run(self._require_run()).data.params
            params = {k: v for k, v in params.items() if k not in existing}
        log_params(self.client, self._require_run(), params)
