"""Benchmark tests train small models: one torch thread for all of them."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: on a shared 2-core machine two threads wait on each other at every op."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
