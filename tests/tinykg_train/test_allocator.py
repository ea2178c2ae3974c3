"""tinykg_train.allocator: with the tuned settings freed memory stays in the process (no page faults
to get it back); TINYKG_CPU_ALLOCATOR=default leaves glibc as it is; a bad value is one line; a CPU
session applies it, and `pipelines.train` turns a bad value into exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipelines._cli import run_cli
from pipelines.train import main as train_main
from tinykg_train import allocator, session
from tinykg_train.config import TrainConfig
from tinykg_train.errors import ConfigError

GLIBC = allocator._glibc_mallopt() is not None

# In a fresh process: optionally tune, then allocate and free 2 MiB blocks three times over, and
# print the page faults the last two rounds took. glibc alone returns such blocks to the OS on free
# (mmap, then heap trimming), so every round faults them in again; tuned, the freed pages are reused.
_FAULTS_SCRIPT = """
import resource, sys, torch
from tinykg_train.allocator import tune_cpu_allocator
print(tune_cpu_allocator(), file=sys.stderr)
def round_():
    blocks = [torch.ones(1 << 19) for _ in range(64)]  # 64 x 2 MiB, touched
    del blocks
round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
round_(); round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_of_reused_blocks(mode: str) -> tuple[int, str]:
    # malloc's knobs alone: torch's huge pages (tested below) change how 2 MiB blocks are placed;
    # with them this script counted 7.7k-8.2k faults for `tuned`, against 0.5k-3.6k without
    env = {**os.environ, allocator.ENV_VAR: mode, allocator.HUGE_PAGES_ENV: "0"}
    done = subprocess.run(
        [sys.executable, "-c", _FAULTS_SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip()), done.stderr.strip().splitlines()[-1]


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_tuned_malloc_reuses_freed_pages_where_glibc_returns_them():
    tuned_faults, tuned_applied = faults_of_reused_blocks("tuned")
    default_faults, default_applied = faults_of_reused_blocks("default")
    assert (tuned_applied, default_applied) == ("True", "False")
    pages = 2 * 64 * (2 << 20) // 4096  # two rounds of 128 MiB, in 4 KiB pages
    # measured here: glibc 33k to 65k faults (its threshold adapts), tuned about 3.5k
    assert default_faults > pages // 4  # glibc: many pages fault in again
    assert tuned_faults < pages // 8  # tuned: few do


# In a fresh process, tuned: 256 MiB in 1 MiB blocks (from the heap), freed; the resident MiB then,
# and after `release_freed_memory`.
_RELEASE_SCRIPT = """
import sys, torch
from tinykg_train.allocator import release_freed_memory, tune_cpu_allocator
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) >> 10
assert tune_cpu_allocator()
blocks = [torch.ones(1 << 18) for _ in range(256)]
del blocks
kept = rss()
print(release_freed_memory(), kept, rss())
"""


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_freed_heap_is_kept_until_released():
    env = {**os.environ, allocator.ENV_VAR: "tuned", allocator.HUGE_PAGES_ENV: "0"}
    done = subprocess.run(
        [sys.executable, "-c", _RELEASE_SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    released, kept, after = done.stdout.split()
    assert released == "True"
    assert int(kept) - int(after) > 200  # most of the 256 MiB freed went back to the OS


def test_only_a_graph_with_big_tables_releases_between_phases():
    assert allocator.releases_between_phases(305 << 20)  # the 10M graph's node table
    assert allocator.releases_between_phases(allocator.PHASE_RELEASE_MIN_TABLE)
    assert not allocator.releases_between_phases(30 << 20)  # 1M: its tensors stay on the heap
    assert not allocator.releases_between_phases(0)


@pytest.mark.parametrize("big", [False, True])
def test_a_big_graph_s_run_releases_between_its_phases_and_rankings(
    big, tiny_dataset_dir: Path, tmp_path: Path, monkeypatch
):
    """Before the epoch's start (KGAT's attention refresh), before each phase and before each
    ranking, when the graph's tables are big; never on a small graph, whose phases reuse what
    the phase before freed."""
    from tinykg_train import epoch, evaluate
    from tinykg_train.trainer import train

    if big:  # the tiny graph's tables count as big
        monkeypatch.setattr(allocator, "PHASE_RELEASE_MIN_TABLE", 1)
    calls, tunings = [], []
    for module in (epoch, evaluate):
        monkeypatch.setattr(module, "release_freed_memory", lambda m=module: calls.append(m))
    monkeypatch.setattr(session, "tune_cpu_allocator", lambda **kw: tunings.append(kw))
    config = TrainConfig(data=str(tiny_dataset_dir), model="kgat", epochs=1, device="cpu",
                         out=str(tmp_path / "run"), max_batches_per_epoch=1)  # fmt: skip
    train(config, tracker=None)
    # epoch start, CF phase, KG phase; the valid, the test and the most-popular ranking
    assert calls == ([epoch, epoch, epoch, evaluate, evaluate, evaluate] if big else [])
    # and the big graph's blocks of 2 MiB and more are mapped apart
    assert tunings == ([{}, {"large_graph": True}] if big else [{}])


# In a fresh process: tune (for a large graph or not), then 256 MiB in 4 MiB blocks, touched and
# freed; the resident MiB before and after.
_LARGE_GRAPH_SCRIPT = """
import sys, torch
from tinykg_train.allocator import tune_cpu_allocator
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) >> 10
assert tune_cpu_allocator(large_graph=sys.argv[1] == "large")
before = rss()
blocks = [torch.ones(1 << 20) for _ in range(64)]
del blocks
print(rss() - before)
"""


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
@pytest.mark.parametrize("graph", ["small", "large"])
def test_a_large_graph_s_big_blocks_go_back_to_the_os_when_freed(graph):
    env = {**os.environ, allocator.ENV_VAR: "tuned", allocator.HUGE_PAGES_ENV: "0"}
    done = subprocess.run(
        [sys.executable, "-c", _LARGE_GRAPH_SCRIPT, graph], env=env, capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    kept = int(done.stdout.strip())
    assert kept < 32 if graph == "large" else kept > 200  # of the 256 MiB freed


def test_a_cpu_session_releases_what_building_it_freed(
    tiny_dataset_dir: Path, tmp_path: Path, monkeypatch
):
    calls = []
    monkeypatch.setattr(session, "release_freed_memory", lambda: calls.append("released"))
    config = TrainConfig(data=str(tiny_dataset_dir), out=str(tmp_path / "run"), device="cpu")
    session.open_session(config, torch.device("cpu"))
    assert calls == ["released"]


def test_release_leaves_malloc_alone_when_asked_for_the_default(monkeypatch):
    monkeypatch.setenv(allocator.ENV_VAR, "default")
    assert allocator.release_freed_memory() is False


def test_requested_setting_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(allocator.ENV_VAR, raising=False)
    assert allocator.requested() == "tuned"
    monkeypatch.setenv(allocator.ENV_VAR, " Default ")
    assert allocator.requested() == "default"
    assert allocator.tune_cpu_allocator() is False  # opted out: nothing applied


def test_a_bad_setting_is_one_line_that_says_what_to_set(monkeypatch):
    monkeypatch.setenv(allocator.ENV_VAR, "jemalloc")
    with pytest.raises(ConfigError) as error:
        allocator.tune_cpu_allocator()
    message = str(error.value)
    assert "TINYKG_CPU_ALLOCATOR must be one of tuned, default (got 'jemalloc')" in message
    assert "\n" not in message


def test_a_cpu_session_tunes_the_allocator(tiny_dataset_dir: Path, tmp_path: Path, monkeypatch):
    calls = []
    monkeypatch.setattr(session, "tune_cpu_allocator", lambda **kw: calls.append("tuned"))
    config = TrainConfig(data=str(tiny_dataset_dir), model="bprmf", out=str(tmp_path / "run"))
    session.open_session(config, torch.device("cpu"))
    assert calls == ["tuned"]


def test_train_cli_rejects_a_bad_allocator_setting_with_exit_2(
    tiny_dataset_dir: Path, tmp_path: Path, monkeypatch, capsys
):
    monkeypatch.setenv(allocator.ENV_VAR, "fast")
    argv = ["--data", str(tiny_dataset_dir), "--model", "bprmf", "--device", "cpu", "--no-mlflow",
            "--out", str(tmp_path / "run")]  # fmt: skip
    assert run_cli(train_main, argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TINYKG_CPU_ALLOCATOR must be one of" in err
    assert not (tmp_path / "run").exists()


def _thp_mode() -> str | None:
    """The kernel's transparent huge page mode (`always`, `madvise`, `never`), None without THP."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return text.split("[", 1)[1].split("]", 1)[0] if "[" in text else None


# In a fresh process: import tinykg_train first (as every CLI does), then fill 64 MiB of tensors
# and print how much of the process is backed by huge pages.
_HUGE_PAGES_SCRIPT = """
import tinykg_train, torch
blocks = [torch.ones(4 << 20) for _ in range(4)]  # 4 x 16 MiB, touched
for line in open("/proc/self/smaps_rollup"):
    if line.startswith("AnonHugePages:"):
        print(int(line.split()[1]) * 1024)
"""


def huge_page_bytes(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != allocator.HUGE_PAGES_ENV}
    env[allocator.ENV_VAR] = mode
    done = subprocess.run(
        [sys.executable, "-c", _HUGE_PAGES_SCRIPT], env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return int(done.stdout.strip())


@pytest.mark.skipif(_thp_mode() not in ("madvise", "always"), reason="the kernel has no THP")
def test_importing_tinykg_train_backs_big_cpu_tensors_with_huge_pages():
    assert huge_page_bytes("tuned") >= 16 << 20  # a quarter at least (56 MiB of 64 here)
    if _thp_mode() == "madvise":  # only what is advised gets huge pages: nothing, as torch is
        assert huge_page_bytes("default") == 0


def test_huge_pages_are_requested_unless_opted_out_or_set_by_the_user(monkeypatch):
    monkeypatch.delenv(allocator.HUGE_PAGES_ENV, raising=False)
    monkeypatch.setenv(allocator.ENV_VAR, "default")
    assert allocator.request_huge_pages() is False
    assert allocator.HUGE_PAGES_ENV not in os.environ
    monkeypatch.setenv(allocator.ENV_VAR, "no-such-setting")  # at import: never raises
    assert allocator.request_huge_pages() is False
    monkeypatch.delenv(allocator.ENV_VAR)
    monkeypatch.setenv(allocator.HUGE_PAGES_ENV, "0")  # the user's own choice wins
    assert allocator.request_huge_pages() is False
    assert os.environ[allocator.HUGE_PAGES_ENV] == "0"
    monkeypatch.delenv(allocator.HUGE_PAGES_ENV)
    assert allocator.request_huge_pages() is sys.platform.startswith("linux")
    assert os.environ.get(allocator.HUGE_PAGES_ENV) == (
        "1" if sys.platform.startswith("linux") else None
    )
