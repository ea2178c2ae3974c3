"""How many torch CPU threads a run uses: as many as the CPUs this process may really use.

torch's default is the machine's core count. In a container with a CPU quota, or pinned to a few
CPUs, or beside other work, that many threads wait on each other in OpenMP barriers: runs slowed
5-8x on a shared machine (issue 19). So a run picks (`TrainConfig.threads`, `--threads`):

    threads = N given  ->  N
    otherwise          ->  $OMP_NUM_THREADS when set (an explicit choice for this environment),
                           else the CPUs of the process's affinity mask, capped by its cgroup's
                           CPU quota (rounded down), at least 1.

The detection reads files only (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`),
given as paths so tests can feed it fake ones; torch is imported only to apply the choice.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
# Where cgroup v1 mounts the cpu controller, and v2 in a hybrid layout.
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
V2_MOUNTS = ("", "unified")


def affinity_cpus() -> int:
    """CPUs this process may run on (its affinity mask; the CPU count where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> float | None:
    """The CPUs the cgroup quota allows (quota / period), the smallest along the process's cgroup
    and its ancestors; None when no quota is set ("max" in v2, -1 in v1) or nothing is readable."""
    limits = [limit for folder in _cgroup_folders(root, membership) if (limit := _quota(folder))]
    return min(limits) if limits else None


def available_cpus(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> int:
    """The affinity CPUs capped by the cgroup quota (rounded down), at least 1."""
    cpus = affinity_cpus()
    limit = cgroup_cpu_limit(root, membership)
    if limit is not None:
        cpus = min(cpus, math.floor(limit))
    return max(cpus, 1)


def auto_threads(environ: dict[str, str] | None = None) -> int:
    """The thread count of `threads: null`: $OMP_NUM_THREADS if it is a positive integer, else
    `available_cpus()`."""
    text = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    return available_cpus()


def apply_threads(requested: int | None) -> int:
    """Set torch's intra-op threads to `requested` (None: `auto_threads()`); returns the count set."""
    import torch

    torch.set_num_threads(requested or auto_threads())
    return torch.get_num_threads()


def _cgroup_folders(root: Path, membership: Path) -> list[Path]:
    """The folders that may hold the process's CPU quota: its cgroup and each ancestor, for v2 and
    for a v1 cpu controller (just the roots when /proc/self/cgroup is unreadable)."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        lines = ["0::/"]
    folders: list[Path] = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            mounts = V2_MOUNTS
        elif "cpu" in controllers.split(","):
            mounts = V1_CPU_MOUNTS
        else:
            continue
        parts = [part for part in path.strip().split("/") if part]
        for mount in mounts:
            for depth in range(len(parts), -1, -1):
                folder = root.joinpath(mount, *parts[:depth])
                if folder.is_dir() and folder not in folders:
                    folders.append(folder)
    return folders


def _quota(folder: Path) -> float | None:
    """CPUs allowed by the quota files in `folder` (v2 or v1), None for no quota or none there."""
    try:
        fields = (folder / "cpu.max").read_text().split()
    except OSError:
        fields = None
    if fields:
        if fields[0] == "max" or len(fields) < 2:
            return None
        return _ratio(fields[0], fields[1])
    try:
        quota = (folder / "cpu.cfs_quota_us").read_text().strip()
        period = (folder / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None
