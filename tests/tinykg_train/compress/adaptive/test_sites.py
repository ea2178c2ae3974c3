"""compress.adaptive.sites: a width plan reaches every quantized save of a step in order, and a
step meets the same sites whatever widths they get."""

from __future__ import annotations

import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig, compress_saved_tensors, ops
from tinykg_train.compress.adaptive.sites import WidthPlan, applying


def three_saves(x: torch.Tensor, config: CompressionConfig) -> torch.Tensor:
    a = ops.mul(x, x * 2, config=config)  # saves x and 2x
    return ops.l2_normalize(a, config=config).sum()  # saves its output (at normalize_bits)


def held_bytes(plan: WidthPlan | None, record=None) -> int:
    x = torch.randn(64, 32, requires_grad=True)
    config = CompressionConfig(bits=2)
    with compress_saved_tensors(config), applying(plan, record=record), ActivationMeter() as meter:
        loss = three_saves(x, config)
    loss.backward()
    return meter.total_bytes


def test_each_site_is_stored_at_its_planned_width_and_recorded_in_order():
    sites = []
    held_bytes(WidthPlan((8, 1, 32)), record=sites)
    assert [s.index for s in sites] == [0, 1, 2]
    assert [s.requested_bits for s in sites] == [2, 2, 4]  # the op's own width, floors included
    assert all(s.shape == (64, 32) for s in sites)
    # 8 bits: 64 rows x (32 code bytes + 4 parameter bytes); 1 bit: 16 groups of four rows (at least
    # 128 elements a group, see CompressionConfig.group_for) x (16 + 4); exact: floats; + the norms
    assert held_bytes(WidthPlan((8, 1, 32))) == 64 * 36 + 16 * 20 + 64 * 32 * 4 + 64 * 4


def test_sites_past_the_plan_keep_the_ops_own_width():
    assert held_bytes(WidthPlan((2,))) == held_bytes(None)


def test_a_step_meets_the_same_sites_whatever_their_widths(tiny_dataset, make_config):
    """KGAT's next layer reuses a normalized output whether it is quantized or kept exact."""
    from tinykg_train.models import build_model

    torch.manual_seed(0)
    model = build_model("kgat", tiny_dataset, make_config(model="kgat", bits=2, dropout=0.0))
    batch = (torch.arange(8), torch.arange(8), torch.arange(8, 16))
    counts = []
    for plan in (WidthPlan((32,) * 16), WidthPlan((1,) * 16), WidthPlan((4, 32, 2, 32, 8, 1))):
        sites = []
        with compress_saved_tensors(model.compression), applying(plan, record=sites):
            model.loss(*batch).backward()
        counts.append([s.shape for s in sites])
    assert counts[0] == counts[1] == counts[2] and len(counts[0]) > 0
