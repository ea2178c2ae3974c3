"""Rows gathered from a parameter are stored as their indices and rebuilt exactly."""

import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig, compress_saved_tensors
from tinykg_train.compress.codec import Compressed, compress, decompress
from tinykg_train.compress.gathered import Gathered
from tinykg_train.compress.ops import embedding, mul

CONFIG = CompressionConfig(bits=2)


def table_and_index(rows: int = 300):
    gen = torch.Generator().manual_seed(0)
    table = torch.nn.Parameter(torch.randn(rows, 64, generator=gen))
    return table, torch.randint(0, rows, (500,), generator=gen)


def test_rows_of_a_parameter_are_stored_as_narrow_indices_and_rebuilt_exactly():
    table, index = table_and_index()
    rows = table.index_select(0, index)
    stored = compress(rows, CONFIG)
    assert isinstance(stored, Gathered)
    assert stored.index.dtype == torch.uint16 and stored.nbytes == 500 * 2
    assert torch.equal(decompress(stored), rows)
    rebuilt = Gathered.rebuild(stored.meta(), stored.parts())
    assert torch.equal(rebuilt.decode(), rows)


def test_views_of_the_rows_are_rebuilt_as_the_same_views():
    table, index = table_and_index()
    for piece in (*table.index_select(0, index).chunk(3), table.index_select(0, index)[:, 8:40]):
        stored = compress(piece, CONFIG)
        assert isinstance(stored, Gathered)
        assert torch.equal(stored.decode(), piece)


def test_views_of_embedding_rows_are_rebuilt_as_the_same_views():
    table, index = table_and_index()
    with ActivationMeter():  # ops.embedding registers its rows inside a block
        rows = embedding(table, index.view(50, 10), config=CONFIG)  # [50, 10, 64]
        pieces = (rows.view(50, 2, 5, 64)[7:9], rows[:, 3], rows.transpose(0, 1)[2:4], rows[48:, 7:])
        for piece in pieces:
            stored = compress(piece, CONFIG)
            assert isinstance(stored, Gathered)
            assert torch.equal(stored.decode(), piece)
            assert stored.decode().stride() == piece.stride()


def test_a_few_rows_too_small_to_quantize_are_still_stored_as_indices():
    """Kept as they are, they would hold the storage of the whole gather they are a view of."""
    table, index = table_and_index()
    config = CompressionConfig(bits=2, min_numel=4096)
    few = table.index_select(0, index)[:4]  # 256 elements, under min_numel
    stored = compress(few, config)
    assert isinstance(stored, Gathered) and torch.equal(stored.decode(), few)
    computed = few * 2  # not rows of a parameter: kept as it is
    assert compress(computed, config) is computed
    assert compress(few, CompressionConfig(bits=32)) is few  # compression off


def test_a_view_rebuilds_only_the_rows_it_reaches():
    table, index = table_and_index()
    middle = table.index_select(0, index).chunk(3)[1]  # rows 167..333 of 500
    stored = compress(middle, CONFIG)
    # rows outside the chunk point past the table: gathering them would raise
    poisoned = torch.full_like(stored.index.int(), 60_000)
    poisoned[167:334] = stored.index[167:334].int()
    assert torch.equal(Gathered(table, poisoned, stored.view).decode(), middle)


def test_other_gathers_are_quantized():
    table, index = table_and_index()
    activation = table * 2  # not a parameter: its rows are not held by anyone
    assert isinstance(compress(activation.index_select(0, index), CONFIG), Compressed)
    columns = table.index_select(1, torch.arange(32))
    assert isinstance(compress(columns, CONFIG), Compressed)
    with torch.no_grad():  # no autograd record: nothing says where the rows came from
        assert isinstance(compress(table.index_select(0, index), CONFIG), Compressed)


def test_gradients_through_saved_rows_are_exact_and_only_the_index_is_counted():
    table, index = table_and_index()
    other = torch.randn(500, 64, requires_grad=True)
    with compress_saved_tensors(CONFIG), ActivationMeter() as meter:
        rows = table.index_select(0, index)
        out = mul(rows, other, config=CONFIG) + (rows**2).sum()  # an op and the generic hooks
    # index_select's own int64 index, the uint16 copy both saves share, `other` at 2 bits
    assert meter.total_bytes == 500 * 8 + 500 * 2 + (500 * 64 / 4 + 500 * 4)
    exact_rows = table.detach().index_select(0, index)
    probe = torch.randn(500, 64)
    (grad_other,) = torch.autograd.grad((out * probe).sum(), [other])
    assert torch.equal(grad_other, probe * exact_rows)  # read from the rebuilt rows: exact


def test_an_update_of_the_table_before_backward_is_refused():
    table, index = table_and_index()
    other = torch.randn(500, 64, requires_grad=True)
    out = mul(table.index_select(0, index), other, config=CONFIG)
    with torch.no_grad():
        table.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


# -- rows from ops.embedding (a custom Function's output, registered as it is made) ------------------


def test_embedding_rows_of_a_parameter_are_stored_as_indices_and_give_exact_gradients():
    table, index = table_and_index()
    other = torch.randn(500, 64, requires_grad=True)
    with compress_saved_tensors(CONFIG), ActivationMeter() as meter:
        rows = embedding(table, index, config=CONFIG)
        out = mul(rows, other, config=CONFIG)
    # the embedding's uint16 index (shared with the stored rows), `other` at 2 bits
    assert meter.total_bytes == 500 * 2 + (500 * 64 / 4 + 500 * 4)
    probe = torch.randn(500, 64)
    (grad_other,) = torch.autograd.grad((out * probe).sum(), [other])
    assert torch.equal(grad_other, probe * table.detach().index_select(0, index))  # exact rows


def test_embedding_rows_of_a_multi_dim_index_and_their_views_are_rebuilt():
    table, _ = table_and_index()
    index = torch.randint(0, 300, (20, 3, 8), generator=torch.Generator().manual_seed(1))
    with compress_saved_tensors(CONFIG):
        rows = embedding(table, index, config=CONFIG)  # [20, 3, 8, 64]
        for piece in (rows, rows.view(20, -1, 8, 64), rows[:, 1], rows.chunk(2)[1]):
            stored = compress(piece, CONFIG)
            assert isinstance(stored, Gathered)
            assert torch.equal(stored.decode(), piece)


def test_embedding_rows_of_an_activation_or_changed_in_place_are_quantized():
    table, index = table_and_index()
    with compress_saved_tensors(CONFIG):
        activation = table * 2
        assert isinstance(compress(embedding(activation, index, config=CONFIG), CONFIG), Compressed)
        rows = embedding(table, index, config=CONFIG)
        rows.mul_(3)  # no longer the table's rows
        assert isinstance(compress(rows, CONFIG), Compressed)
