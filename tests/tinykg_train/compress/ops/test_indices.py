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
    assert wide.dtype == torch.int32 and torch.equal(wide.long(), index)
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
