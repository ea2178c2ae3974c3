"""compress.adaptive.allocate: widths priced at exactly the bytes the codec stores, and the greedy
choice spends its budget where the measured error is largest."""

from __future__ import annotations

import itertools

import pytest
import torch

from tinykg_train.compress import CompressionConfig
from tinykg_train.compress.adaptive.allocate import (
    allocate,
    predicted_error,
    site_error,
    stored_bytes,
)
from tinykg_train.compress.adaptive.sites import Site
from tinykg_train.compress.codec import compress

CONFIG = CompressionConfig(bits=2, scheme="auto")


@pytest.mark.parametrize("shape", [(300, 64), (1000, 16), (7, 200), (5000,), (33, 5, 12)])
@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_stored_bytes_are_what_the_codec_stores(shape, bits):
    x = torch.randn(shape)
    stored = compress(x, CONFIG.at_width(bits))
    assert stored_bytes(Site(0, shape, 2, ""), bits, CONFIG) == stored.nbytes


def test_exact_sites_cost_their_floats_and_add_no_error():
    site = Site(0, (10, 10), 2, "")
    assert stored_bytes(site, 32, CONFIG) == 400
    assert predicted_error(1.0, 2, 32) == 0.0


def test_predicted_error_follows_the_rounding_variance_law():
    assert predicted_error(0.09, 2, 1) == pytest.approx(0.81)  # (3 / 1)^2
    assert predicted_error(0.09, 2, 4) == pytest.approx(0.09 * (3 / 15) ** 2)
    assert predicted_error(0.09, 2, 8) < predicted_error(0.09, 2, 4) < predicted_error(0.09, 2, 2)


def sites(n: int) -> list[Site]:
    return [Site(i, (256, 64), 2, f"layer{i}") for i in range(n)]


def test_the_average_width_budget_holds_and_the_sensitive_site_gets_the_bits():
    errors = [1e-4, 1e-1, 1e-3, 1e-5]
    choice = allocate(sites(4), {2: errors}, CONFIG, average_bits=2.5)
    assert choice.average_bits(sites(4)) <= 2.5
    assert choice.widths[1] == max(choice.widths)
    assert choice.widths[3] == min(choice.widths)


def test_a_byte_budget_holds_and_more_budget_never_means_more_error():
    errors = [0.3, 0.02, 0.05, 0.001]
    previous = None
    for budget in (20_000, 40_000, 80_000, 200_000, 400_000):
        choice = allocate(sites(4), {2: errors}, CONFIG, budget_bytes=budget)
        assert choice.bytes <= budget
        if previous is not None:
            assert choice.predicted_error <= previous
        previous = choice.predicted_error
    assert allocate(sites(4), {2: errors}, CONFIG, budget_bytes=10**9).widths == (32,) * 4


def test_the_greedy_choice_is_close_to_the_best_on_small_cases():
    rng = torch.Generator().manual_seed(0)
    for _ in range(20):
        errors = (10 ** (-4 * torch.rand(4, generator=rng))).tolist()
        budget = 2.0 + 2 * float(torch.rand((), generator=rng))
        choice = allocate(sites(4), {2: errors}, CONFIG, average_bits=budget, widths=(1, 2, 4, 8))
        best = min(
            sum(predicted_error(e, 2, b) for e, b in zip(errors, widths, strict=True))
            for widths in itertools.product((1, 2, 4, 8), repeat=4)
            if sum(widths) / 4 <= budget
        )
        assert choice.predicted_error <= 1.5 * best + 1e-12


def test_a_budget_below_the_narrowest_widths_is_refused():
    with pytest.raises(ValueError, match="narrowest"):
        allocate(sites(2), {2: [0.1, 0.1]}, CONFIG, budget_bytes=100)
    with pytest.raises(ValueError, match="narrowest"):
        allocate(sites(2), {2: [0.1, 0.1]}, CONFIG, average_bits=0.5)


def test_measured_widths_are_used_as_measured_and_wider_ones_follow_the_law():
    measured = {1: 50.0, 2: 1.0}  # 1 bit far worse than the law's 9x, as measured on KGIN
    assert site_error(measured, 1) == 50.0 and site_error(measured, 2) == 1.0
    assert site_error(measured, 4) == pytest.approx((3 / 15) ** 2)
    assert site_error(measured, 32) == 0.0
    assert site_error({2: 1.0}, 1) == pytest.approx(9.0)


def test_a_site_that_breaks_at_one_bit_is_kept_wider():
    sites_ = sites(2)
    law_only = allocate(sites_, {2: [1.0, 1.0]}, CONFIG, average_bits=1.5, widths=(1, 2))
    measured = allocate(
        sites_, {1: [1e6, 9.0], 2: [1.0, 1.0]}, CONFIG, average_bits=1.5, widths=(1, 2)
    )
    assert sorted(law_only.widths) == [1, 2]
    assert measured.widths == (2, 1)
