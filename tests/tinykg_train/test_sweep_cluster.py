"""Which Ray a sweep uses: a private local one (own temp dir and token, removed after) unless a
cluster is given; and refusals that would otherwise leave Tune waiting forever."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tinykg_train.errors import ConfigError
from tinykg_train.sweep.cluster import (
    check_connection_args,
    check_resources,
    in_ray_job,
    ray_connection,
)


def test_private_local_ray_keeps_to_its_temp_dir_and_token(monkeypatch):
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    home_token = Path.home() / ".ray" / "auth_token"
    had_home_token = home_token.exists()
    with ray_connection(num_cpus=1, num_gpus=0) as where:
        assert where.startswith("local Ray (")
        folder = Path(where.removeprefix("local Ray (").rstrip(")"))
        token = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
        assert token.parent == folder and oct(token.stat().st_mode & 0o777) == "0o600"
        assert len(token.read_text()) == 64
        assert ray.cluster_resources()["CPU"] == 1
        with pytest.raises(
            ConfigError, match="each trial asks for 2 CPU but the Ray cluster has 1"
        ):
            check_resources(2, 0)
        with pytest.raises(ConfigError, match="lower --gpus-per-trial"):
            check_resources(1, 1)
        check_resources(1, 0)
    assert not ray.is_initialized()
    assert not folder.exists()
    assert "RAY_AUTH_TOKEN_PATH" not in os.environ
    assert home_token.exists() == had_home_token  # ~/.ray left alone


def test_a_job_address_means_the_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not in_ray_job()
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert in_ray_job()
    with pytest.raises(ConfigError, match="a cluster has its own resources"):
        check_connection_args(None, 2, None)


@pytest.mark.parametrize(
    ("num_cpus", "num_gpus", "message"),
    [(0, None, "--num-cpus needs to be positive"), (None, -1, "--num-gpus needs to be >= 0")],
)
def test_local_sizes_must_make_sense(monkeypatch, num_cpus, num_gpus, message):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError, match=message):
        check_connection_args(None, num_cpus, num_gpus)
