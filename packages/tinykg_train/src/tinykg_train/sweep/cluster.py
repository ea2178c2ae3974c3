"""Connecting a sweep to Ray: a given cluster, the cluster of a submitted job, or a private local one.

- `--address ADDR`: `ray.init(address=ADDR)` (a running cluster).
- `RAY_ADDRESS` set (inside `ray job submit ... -- python -m pipelines.sweep`, Ray sets it for the
  job's driver): plain `ray.init()` joins that cluster.
- Otherwise a private single-machine Ray: `ray.init(address="local")` in a fresh temporary dir with
  its own auth token and no dashboard, removed afterwards. Plain `ray.init()` would instead join
  whatever cluster this machine started last.

Token authentication stays on in every case (Ray 2.60 default). A cluster address that accepts no
connection, or a cluster that turns this client's token down, is a one-line ConfigError (Ray itself
would retry for minutes, then name neither).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tinykg_train.errors import ConfigError

# Ray's Unix sockets live under the temp dir and their paths may not exceed 107 bytes.
_MAX_TEMP_BASE = 40


def in_ray_job() -> bool:
    """True when a Ray cluster address is given by the environment (a submitted job or the user)."""
    return bool(os.environ.get("RAY_ADDRESS"))


def _short_temp_base() -> str:
    base = tempfile.gettempdir()
    return base if len(base) <= _MAX_TEMP_BASE or not Path("/tmp").is_dir() else "/tmp"


@contextlib.contextmanager
def _private_token(folder: Path) -> Iterator[None]:
    """Point Ray at a fresh 0600 token file for this local cluster (leaves ~/.ray alone)."""
    path = folder / "auth_token"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32))
    saved = os.environ.get("RAY_AUTH_TOKEN_PATH")
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)
    _forget_loaded_token()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
        else:
            os.environ["RAY_AUTH_TOKEN_PATH"] = saved
        _forget_loaded_token()


def _forget_loaded_token() -> None:
    """Ray keeps the first token it read for the rest of the process: drop it, so that a connection
    made earlier in this process (another cluster, another token) does not send the old one."""
    try:
        from ray._raylet import AuthenticationTokenLoader
    except ImportError:  # a Ray without token auth has no token to forget
        return
    AuthenticationTokenLoader.instance().reset_cache()


def check_connection_args(address: str | None, num_cpus: int | None, num_gpus: int | None) -> None:
    """Refuse local-Ray sizes for a cluster, and sizes below what a local Ray can run with."""
    if (address or in_ray_job()) and (num_cpus is not None or num_gpus is not None):
        raise ConfigError(
            "--num-cpus/--num-gpus size a private local Ray; a cluster has its own resources"
        )
    if num_cpus is not None and num_cpus < 1:
        raise ConfigError(f"--num-cpus needs to be positive (got {num_cpus})")
    if num_gpus is not None and num_gpus < 0:
        raise ConfigError(f"--num-gpus needs to be >= 0 (got {num_gpus})")


def check_reachable(address: str, timeout: float = 3.0) -> None:
    """Refuse a `host:port` (or `ray://host:port`) address nothing listens on; other forms
    (`auto`) are left to Ray."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise ConfigError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}): start one with "
            "`ray start --head` or fix --address / RAY_ADDRESS"
        ) from None


def connection_problem(address: str, exc: BaseException) -> str:
    """One line on why `ray.init(address)` failed: a token turned down, else Ray's own first line."""
    causes, seen = [], exc
    while seen is not None and len(causes) < 10:
        causes.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    text = "\n".join(causes)
    if "Unauthenticated" in text or "InvalidAuthToken" in text:
        if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
            return (
                f"the Ray cluster at {address} requires token authentication and this client sent "
                "no token: export RAY_AUTH_MODE=token (and RAY_AUTH_TOKEN_PATH=<the cluster's token "
                "file> unless it is ~/.ray/auth_token)"
            )
        return (
            f"the Ray cluster at {address} turned this client's token down: point "
            "RAY_AUTH_TOKEN_PATH at the token file the cluster was started with"
        )
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"cannot connect to the Ray cluster at {address}: {first[:300]}"


def job_logging(log_level: str | None) -> dict:
    """`ray.init` arguments setting the root log level of this job's Ray processes (None: Ray's)."""
    import ray

    return {} if log_level is None else {"logging_config": ray.LoggingConfig(log_level=log_level)}


@contextlib.contextmanager
def held_stderr() -> Iterator[dict[str, bool]]:
    """Hold back what this process writes to file descriptor 2 (C++ code included) in the block;
    it is written out afterwards unless the caller sets the yielded `drop` to True."""
    sys.stderr.flush()
    saved = os.dup(2)
    control = {"drop": False}
    with tempfile.TemporaryFile(mode="w+b") as held:
        os.dup2(held.fileno(), 2)
        try:
            yield control
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode(errors="replace")
            if text and not control["drop"]:
                sys.stderr.write(text)
                sys.stderr.flush()


def join_cluster(address: str | None, log_level: str | None = None) -> None:
    """`ray.init` on a running cluster (`address`, else RAY_ADDRESS), failures as one line.

    Ray's GCS client retries a refused token for 20 s with a warning per attempt on stderr; those
    are dropped when the failure is one `connection_problem` explains.
    """
    import ray

    where = address or os.environ["RAY_ADDRESS"]
    check_reachable(where)
    problem = None
    with held_stderr() as held:
        try:
            ray.init(
                address=address or None, logging_level=logging.WARNING, **job_logging(log_level)
            )
        except Exception as exc:  # ConnectionError, AuthenticationError, RuntimeError (GCS client)
            problem = connection_problem(where, exc)
            held["drop"] = True
    if problem is not None:
        raise ConfigError(problem)


@contextlib.contextmanager
def ray_connection(
    address: str | None = None,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    log_level: str | None = None,
) -> Iterator[str]:
    """Connect to Ray for the duration of the block; yields a description of where the work runs.

    `log_level` (e.g. "ERROR") quiets the Python logging of this job's workers and actors.
    """
    import ray

    check_connection_args(address, num_cpus, num_gpus)
    if address or in_ray_job():
        join_cluster(address, log_level)
        try:
            yield f"Ray cluster at {address or os.environ['RAY_ADDRESS']}"
        finally:
            ray.shutdown()
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    folder = Path(tempfile.mkdtemp(prefix="tinykg-ray-", dir=_short_temp_base()))
    try:
        with _private_token(folder):
            ray.init(
                address="local",
                _temp_dir=str(folder),
                include_dashboard=False,
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                logging_level=logging.WARNING,
                **job_logging(log_level),
            )
            try:
                yield f"local Ray ({folder})"
            finally:
                ray.shutdown()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def check_resources(cpus_per_trial: float, gpus_per_trial: float, workers: int = 1) -> None:
    """Refuse a sweep whose single trial needs more than the whole cluster has (Tune would wait
    forever); a trial with `workers` > 1 reserves the per-trial resources once per Train worker."""
    import ray

    total = ray.cluster_resources()
    for key, needed, flag in (
        ("CPU", cpus_per_trial, "--cpus-per-trial"),
        ("GPU", gpus_per_trial, "--gpus-per-trial"),
    ):
        have = total.get(key, 0.0)
        if needed * workers > have:
            asks = f"{needed:g} {key}" if workers == 1 else f"{workers} workers x {needed:g} {key}"
            fix = flag if workers == 1 else f"workers or {flag}"
            raise ConfigError(
                f"each trial asks for {asks} but the Ray cluster has {have:g}; lower {fix} (resources.{key.lower()})"
            )
