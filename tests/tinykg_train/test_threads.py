"""Thread count detection from fake cgroup files (v1 and v2), the environment, and its application."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tinykg_train import threads
from tinykg_train.threads import (
    affinity_cpus,
    apply_threads,
    auto_threads,
    available_cpus,
    cgroup_cpu_limit,
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def v2(tmp_path) -> tuple[Path, Path]:
    """A cgroup v2 tree; the process is in /jobs/run (its /proc/self/cgroup says so)."""
    root, membership = tmp_path / "cgroup", tmp_path / "proc_self_cgroup"
    write(root / "cpu.max", "max 100000\n")
    write(root / "jobs" / "cpu.max", "max 100000\n")
    write(root / "jobs" / "run" / "cpu.max", "max 100000\n")
    write(membership, "0::/jobs/run\n")
    return root, membership


def test_v2_quota_is_quota_over_period(v2):
    root, membership = v2
    write(root / "jobs" / "run" / "cpu.max", "150000 100000\n")
    assert cgroup_cpu_limit(root, membership) == 1.5


def test_v2_without_a_quota_is_no_limit(v2):
    assert cgroup_cpu_limit(*v2) is None


def test_the_tightest_ancestor_quota_wins(v2):
    root, membership = v2
    write(root / "jobs" / "run" / "cpu.max", "400000 100000\n")
    write(root / "jobs" / "cpu.max", "200000 100000\n")
    assert cgroup_cpu_limit(root, membership) == 2.0


def test_v1_cfs_quota_and_minus_one(tmp_path):
    root, membership = tmp_path / "cgroup", tmp_path / "proc_self_cgroup"
    write(membership, "4:memory:/a\n2:cpu,cpuacct:/a\n0::/\n")
    write(root / "cpu,cpuacct" / "a" / "cpu.cfs_quota_us", "-1\n")
    write(root / "cpu,cpuacct" / "a" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(root, membership) is None
    write(root / "cpu,cpuacct" / "a" / "cpu.cfs_quota_us", "50000\n")
    assert cgroup_cpu_limit(root, membership) == 0.5


def test_an_unreadable_membership_reads_the_root(tmp_path):
    root = tmp_path / "cgroup"
    write(root / "cpu.max", "300000 100000\n")
    assert cgroup_cpu_limit(root, tmp_path / "missing") == 3.0
    assert cgroup_cpu_limit(tmp_path / "no_cgroup_fs", tmp_path / "missing") is None


def test_available_cpus_is_affinity_capped_by_the_quota_rounded_down(v2, monkeypatch):
    root, membership = v2
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 8)
    assert available_cpus(root, membership) == 8
    write(root / "jobs" / "run" / "cpu.max", "250000 100000\n")
    assert available_cpus(root, membership) == 2
    write(root / "jobs" / "run" / "cpu.max", "20000 100000\n")  # a fifth of a CPU
    assert available_cpus(root, membership) == 1
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 1)
    write(root / "jobs" / "run" / "cpu.max", "400000 100000\n")
    assert available_cpus(root, membership) == 1


def test_this_process_gets_at_least_one_cpu_and_no_more_than_its_affinity():
    assert 1 <= available_cpus() <= affinity_cpus()


def test_omp_num_threads_is_an_explicit_choice_else_the_available_cpus(monkeypatch):
    monkeypatch.setattr(threads, "available_cpus", lambda: 3)
    assert auto_threads({"OMP_NUM_THREADS": "5"}) == 5
    assert auto_threads({}) == 3
    assert auto_threads({"OMP_NUM_THREADS": "0"}) == auto_threads({"OMP_NUM_THREADS": "x"}) == 3


def test_apply_threads_sets_torch_and_says_what_it_set(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert apply_threads(2) == 2 == torch.get_num_threads()
        monkeypatch.setattr(threads, "auto_threads", lambda: 1)
        assert apply_threads(None) == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
