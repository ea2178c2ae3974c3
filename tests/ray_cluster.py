"""A private Ray head on 127.0.0.1 for tests (the recipe of ../shared/RAY.md), stopped by PID.

    with LocalRayCluster(num_cpus=2) as cluster:
        done = cluster.submit(["python", "-m", "pipelines.sweep", ...], working_dir=repo_root)

Token authentication stays on: the cluster gets its own token file, every listening port is a free
one given explicitly (fixed defaults collide with any other Ray on the machine), and loopback is kept
as the node address. `stop()` ends exactly this cluster's processes: those naming its temp dir or its
GCS address and all their descendants, raylet first, gcs_server last; never `ray stop`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

PORT_NAMES = (
    "gcs",
    "dashboard",
    "dashboard_agent_listen",
    "dashboard_agent_grpc",
    "metrics_export",
    "runtime_env_agent",
    "client_server",
    "node_manager",
    "object_manager",
    "dashboard_metric",
    "autoscaler_metric",
)


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1 (all held open until every one is chosen)."""
    sockets = []
    try:
        for _ in range(count):
            handle = socket.socket()
            handle.bind(("127.0.0.1", 0))
            sockets.append(handle)
        return [handle.getsockname()[1] for handle in sockets]
    finally:
        for handle in sockets:
            handle.close()


class LocalRayCluster:
    """One single-node Ray cluster on loopback with its own token, ports and temp dir."""

    def __init__(self, num_cpus: int = 2) -> None:
        self.num_cpus = num_cpus
        # short: Ray's Unix socket paths under the temp dir may not exceed 107 bytes
        self.tmp = Path(tempfile.mkdtemp(prefix="tkray-", dir="/tmp"))
        self.ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
        self.token_path = self.tmp / "auth_token"
        self.started = False

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['dashboard']}"

    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.ports['gcs']}"

    def env(self) -> dict[str, str]:
        """Environment for `ray start` and for clients of this cluster (`ray job submit`)."""
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=str(self.token_path),
            RAY_USAGE_STATS_ENABLED="0",
            RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
            DASHBOARD_METRIC_PORT=str(self.ports["dashboard_metric"]),
            AUTOSCALER_METRIC_PORT=str(self.ports["autoscaler_metric"]),
            TMPDIR=str(self.tmp),
            # the job's `python` is the one on the PATH of `ray start`: this environment's
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        return env

    def _ray(self) -> str:
        return str(Path(sys.executable).parent / "ray")

    def start(self, timeout: float = 120) -> LocalRayCluster:
        descriptor = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32))
        p = self.ports
        command = [
            self._ray(),
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={p['gcs']}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={p['dashboard']}",
            f"--dashboard-agent-listen-port={p['dashboard_agent_listen']}",
            f"--dashboard-agent-grpc-port={p['dashboard_agent_grpc']}",
            f"--metrics-export-port={p['metrics_export']}",
            f"--runtime-env-agent-port={p['runtime_env_agent']}",
            f"--ray-client-server-port={p['client_server']}",
            f"--node-manager-port={p['node_manager']}",
            f"--object-manager-port={p['object_manager']}",
            "--min-worker-port=20000",
            "--max-worker-port=20999",
            f"--num-cpus={self.num_cpus}",
            "--num-gpus=0",
            f"--temp-dir={self.tmp / 'ray'}",
            "--disable-usage-stats",
        ]
        self.started = True  # from here on, stop() must run even if start fails half-way
        done = subprocess.run(
            command, env=self.env(), capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise RuntimeError(f"ray start failed ({done.returncode}): {done.stderr[-2000:]}")
        return self

    def submit(
        self,
        entrypoint: list[str],
        working_dir: Path,
        env_vars: dict[str, str] | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess:
        """`ray job submit --working-dir DIR -- ENTRYPOINT`, waiting for the job; returns the client's result."""
        command = [
            self._ray(),
            "job",
            "submit",
            "--address",
            self.dashboard_url,
            "--working-dir",
            str(working_dir),
            "--runtime-env-json",
            json.dumps({"env_vars": env_vars or {}}),
            "--",
            *entrypoint,
        ]
        return subprocess.run(
            command,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=working_dir,
        )

    # -- stopping ---------------------------------------------------------------------------------------

    def processes(self) -> list[psutil.Process]:
        """This cluster's processes: those naming its temp dir or GCS address, and their descendants."""
        marks = (str(self.tmp), self.gcs_address)
        own = {psutil.Process().pid, *(p.pid for p in psutil.Process().parents())}
        found: dict[int, psutil.Process] = {}
        for process in psutil.process_iter(["cmdline"]):
            command = " ".join(process.info["cmdline"] or ())
            if any(mark in command for mark in marks):
                found[process.pid] = process
        for process in list(found.values()):
            with contextlib.suppress(psutil.Error):
                for child in process.children(recursive=True):
                    found.setdefault(child.pid, child)
        return [process for pid, process in found.items() if pid not in own]

    def stop(self) -> None:
        """Stop this cluster (raylet, then the rest, then gcs_server), SIGKILL what is left; remove the temp dir."""
        if not self.started:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        processes = self.processes()

        def name(process: psutil.Process) -> str:
            try:
                return process.name()
            except psutil.Error:
                return ""

        phases = (
            [p for p in processes if name(p) == "raylet"],
            [p for p in processes if name(p) not in ("raylet", "gcs_server")],
            [p for p in processes if name(p) == "gcs_server"],
        )
        for phase in phases:
            for process in phase:
                with contextlib.suppress(psutil.Error):
                    process.send_signal(signal.SIGTERM)
            psutil.wait_procs(phase, timeout=5)
        deadline = time.monotonic() + 3
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(left, timeout=5)
        self.started = False
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info) -> None:
        self.stop()
