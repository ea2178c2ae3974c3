import pytest
import torch

from tinykg_train.compress import ActivationMeter
from tinykg_train.compress.ops.indices import compact_index, narrowest_dtype, widen_index


@pytest.mark.parametrize(
    ("size", "dtype"),
    [
        (1, torch.uint8),
        (256, torch.uint8),
        (257, torch.uint16),
        (65_536, torch.uint16),
        (65_537, torch.int32),
        (2**31 - 1, torch.int32),
        (2**31, None),
    ],
)
def test_narrowest_dtype_holds_every_index_below_size(size, dtype):
    assert narrowest_dtype(size) == dtype


def test_compact_then_widen_round_trips_the_values():
    index = torch.tensor([0, 255, 65_535, 12_345])
    narrow = compact_index(index, 65_536)
    assert narrow.dtype == torch.uint16
    wide = widen_index(narrow)
    assert wide.dtype == torch.int64 and torch.equal(wide, index)
    assert compact_index(index, 2**40) is index  # only int64 holds it


def test_one_index_is_converted_once_inside_a_block():
    index = torch.randint(0, 1000, (500,))
    assert compact_index(index, 1000) is not compact_index(index, 1000)
    with ActivationMeter():
        assert compact_index(index, 1000) is compact_index(index, 1000)


def test_fresh_views_of_one_index_share_one_copy_inside_a_block():
    edge_index = torch.randint(0, 1000, (2, 500))
    with ActivationMeter():
        first = compact_index(edge_index[0], 1000)  # the view dies at once
        assert compact_index(edge_index[0], 1000) is first
        assert compact_index(edge_index[1], 1000) is not first


def test_index_add_sums_in_the_same_order_with_a_widened_index():
    """Backward widens saved indices to int64 (torch's fast index_add_); the sums must be the int32
    loop's bit for bit: many duplicates, values spanning orders of magnitude (order-sensitive)."""
    generator = torch.Generator().manual_seed(0)
    for rows, count, width in [(7, 4000, 64), (300, 2048, 33), (1, 500, 8)]:
        index = torch.randint(0, rows, (count,), generator=generator)
        scale = torch.exp(4 * torch.randn(count, 1, generator=generator))
        source = torch.randn(count, width, generator=generator) * scale
        narrow = compact_index(index, rows)
        expected = source.new_zeros(rows, width).index_add_(0, index.int(), source)
        actual = source.new_zeros(rows, width).index_add_(0, widen_index(narrow), source)
        assert torch.equal(actual, expected)
