"""compress.adaptive.budget: the model state is priced exactly, a step's peak is measured, and a
budget no width fits is refused with the least one that does."""

from __future__ import annotations

import pytest
import torch

from tinykg_train.compress.adaptive.allocate import stored_bytes
from tinykg_train.compress.adaptive.budget import (
    PhaseMemory,
    measure_phase,
    model_state_bytes,
    site_budget,
    size_text,
    step_peak_bytes,
)
from tinykg_train.compress.adaptive.sites import Site
from tinykg_train.compress.config import CompressionConfig
from tinykg_train.errors import ConfigError


def test_model_state_is_parameters_with_two_adam_moments_and_buffers():
    model = torch.nn.Linear(10, 5)
    model.register_buffer("graph", torch.zeros(100, dtype=torch.int32))
    assert model_state_bytes(model) == (55 * 4) * 3 + 400


def test_a_compact_adam_state_counts_the_tables_compact_moments():
    model = torch.nn.Module()
    model.table, model.bias = (
        torch.nn.Parameter(torch.zeros(30, 8)),
        torch.nn.Parameter(torch.zeros(8)),
    )
    model.embedding_tables = ("table",)
    table, bias = 30 * 8 * 4, 8 * 4
    assert model_state_bytes(model) == (table + bias) * 3
    # the table: bfloat16 first moment per element, float32 second moment per row
    assert model_state_bytes(model, adam_state="rowwise") == table + 30 * 8 * 2 + 30 * 4 + bias * 3
    assert model_state_bytes(model, adam_state="bfloat16") == table + 30 * 8 * 4 + bias * 3


def test_a_steps_peak_is_what_it_holds_at_once():
    def step():
        a = torch.ones(1_000_000)  # 4 MB
        b = torch.ones(500_000)  # 2 MB, both alive
        del a
        c = torch.ones(250_000)  # 1 MB, after 4 MB freed
        del b, c

    peak = step_peak_bytes(step, torch.device("cpu"))
    assert 6_000_000 <= peak <= 6_100_000


def test_a_budget_below_every_site_at_one_bit_names_the_least_that_fits():
    sites = [Site(0, (1000, 64), 2, "")]
    config = CompressionConfig(bits=2)
    memory = PhaseMemory(model_state=10_000_000, fp32_peak=30_000_000, exact_peak=12_000_000,
                         exact_site_bytes=256_000)  # fmt: skip
    least = memory.fixed + stored_bytes(sites[0], 1, config)
    assert site_budget(least, memory, sites, config) == least - memory.fixed
    with pytest.raises(ConfigError, match=r"raise --memory-budget to at least 21\.8MB$"):
        site_budget(least - 1, memory, sites, config)
    assert size_text(520_000) == "520.0 kB" and size_text(1.5e9) == "1.50 GB"
    assert size_text(21_750_001, space="", up=True) == "21.8MB"


def test_measured_phase_memory_orders_fp32_above_compressed(tiny_dataset, make_config):
    from tinykg_train.compress.adaptive.sensitivity import measure
    from tinykg_train.models import build_model

    torch.manual_seed(0)
    model = build_model("kgat", tiny_dataset, make_config(model="kgat", bits=2, embed_dim=32))
    batch = (torch.arange(64), torch.arange(64), torch.arange(64, 128))
    sites = measure(model, model.loss, batch, model.compression).sites
    memory = measure_phase(model, model.loss, batch, model.compression, sites)
    assert memory.model_state == model_state_bytes(model)
    assert memory.fp32_peak > memory.exact_peak > 0
    assert memory.exact_site_bytes == sum(s.numel * 4 for s in sites)
