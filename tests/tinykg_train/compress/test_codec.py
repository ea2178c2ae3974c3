import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.codec import Compressed, Rescaled, compress, decompress, offer_rescaled


def test_keeps_what_is_not_worth_compressing():
    x = torch.randn(64, 64)
    assert compress(x, CompressionConfig()) is x  # bits=32
    assert compress(x[:2, :2], CompressionConfig(bits=2)) is not None
    small = torch.randn(10)
    assert compress(small, CompressionConfig(bits=2)) is small  # under min_numel
    ints = torch.arange(1000)
    assert compress(ints, CompressionConfig(bits=2)) is ints
    assert compress(None, CompressionConfig(bits=2)) is None


@pytest.mark.parametrize("bits", [8, 4, 2, 1])
def test_round_trip_within_one_step_and_smaller(bits):
    x = torch.randn(200, 64, generator=torch.Generator().manual_seed(0))
    config = CompressionConfig(bits=bits, scheme="uniform")  # evenly spaced levels: one step apart
    stored = compress(x, config)
    assert isinstance(stored, Compressed)
    restored = decompress(stored)
    assert restored.shape == x.shape and restored.dtype == x.dtype
    groups = x.reshape(-1, config.group_for(tuple(x.shape)) or 64)  # one row; two rows at 1 bit
    step = (groups.amax(dim=1, keepdim=True) - groups.amin(dim=1, keepdim=True)) / (2**bits - 1)
    error = (restored - x).reshape(groups.shape).abs()
    assert bool((error <= step * 1.01 + 1e-6).all())
    assert stored.nbytes == sum(t.numel() * t.element_size() for t in stored.parts())
    assert x.numel() * 4 / stored.nbytes >= {8: 3.5, 4: 7, 2: 12, 1: 20}[bits]


def test_rebuilds_from_its_parts_and_meta():
    x = torch.randn(300)
    stored = compress(x, CompressionConfig(bits=4))
    rebuilt = Compressed.rebuild(stored.meta(), stored.parts())
    assert torch.equal(rebuilt.decode(), stored.decode())


def test_one_tensor_version_is_compressed_once_inside_a_block():
    x = torch.randn(100, 64)
    config = CompressionConfig(bits=2)
    assert compress(x, config) is not compress(x, config)  # no block: no sharing
    with ActivationMeter():
        first = compress(x, config)
        assert compress(x, config) is first
        assert compress(x, CompressionConfig(bits=4)) is not first
        x.add_(1.0)  # a new version: compressed anew
        assert compress(x, config) is not first


def test_a_tensor_stored_wider_serves_the_ops_that_save_it_at_fewer_bits():
    x = torch.randn(100, 64)
    config = CompressionConfig(bits=2)
    with ActivationMeter():
        wide = compress(x, config.for_normalized())  # 4 bits, as ops.l2_normalize saves
        assert wide.quantized.bits == 4
        assert compress(x, config) is wide  # not a second, 2-bit copy
        assert compress(x, CompressionConfig(bits=8)) is not wide  # never narrower than asked
        y = torch.randn(100, 64)
        narrow = compress(y, config)
        assert narrow.quantized.bits == 2 and compress(y, config.for_normalized()) is not narrow


def test_projection_stores_fewer_columns_and_reconstructs_unbiasedly():
    x = torch.randn(64, 128, generator=torch.Generator().manual_seed(0))
    config = CompressionConfig(bits=8, projection_ratio=4)
    plain = compress(x, CompressionConfig(bits=8), project=True)
    projected = compress(x, config, project=True)
    assert projected.projection is not None
    assert projected.nbytes < plain.nbytes / 3
    assert compress(x, config).projection is None  # only where asked (linear inputs)
    torch.manual_seed(0)
    mean = torch.stack([decompress(compress(x, config, project=True)) for _ in range(400)]).mean(0)
    single = decompress(projected)
    assert (mean - x).norm() < 0.2 * (single - x).norm()


def test_parameters_are_kept_as_they_are():
    """A parameter is held by the model anyway: a quantized copy would only cost time and accuracy."""
    weight = torch.nn.Parameter(torch.randn(100, 64))
    assert compress(weight, CompressionConfig(bits=2)) is weight


def test_a_rescaled_tensor_rebuilds_from_its_parts_and_decodes_to_y_times_scale():
    x = torch.randn(100, 64, generator=torch.Generator().manual_seed(0)) * torch.rand(100, 1) * 10
    x[7] = 1e-3  # a norm under `least`: x = y * least
    scale = x.norm(dim=1, keepdim=True)
    y = x / scale.clamp_min(0.1)
    stored = Rescaled(compress(y, CompressionConfig(bits=8)), scale, 0.1)
    rebuilt = Rescaled.rebuild(stored.meta(), stored.parts())
    torch.testing.assert_close(rebuilt.decode(), decompress(stored.stored) * scale.clamp_min(0.1))
    assert float((stored.decode() - x).norm() / x.norm()) < 0.01
    assert stored.nbytes == stored.stored.nbytes + 100 * 4


def test_a_rescaled_form_of_an_exact_output_rebuilds_x_without_touching_the_output():
    """A normalized output kept exact (a `bits: auto` plan) still serves later saves of its input."""
    x = torch.randn(50, 16, generator=torch.Generator().manual_seed(1)) * 3
    scale = x.norm(dim=1, keepdim=True)
    y = x / scale.clamp_min(1e-12)
    stored = Rescaled(y, scale, 1e-12)
    rebuilt = Rescaled.rebuild(stored.meta(), stored.parts())
    torch.testing.assert_close(rebuilt.decode(), x)
    torch.testing.assert_close(y, x / scale)  # decoding did not scale the stored output in place
    assert stored.nbytes == (50 * 16 + 50) * 4


def test_an_offered_rescaled_form_serves_later_saves_of_the_tensor():
    x, y = torch.randn(100, 64), torch.randn(100, 64)
    config = CompressionConfig(bits=2)
    scale = torch.rand(100, 1)
    offer_rescaled(x, compress(y, config.for_normalized()), scale, 0.0, config.for_normalized())
    assert not isinstance(compress(x, config), Rescaled)
    with ActivationMeter():
        scaled = compress(y, config.for_normalized())
        offer_rescaled(x, scaled, scale, 0.0, config.for_normalized())
        reused = compress(x, config)
        assert isinstance(reused, Rescaled) and reused.stored is scaled
        assert compress(x, CompressionConfig(bits=8)) is not reused  # never narrower than asked
        x.add_(1.0)  # a new version: the offer no longer describes it
        assert not isinstance(compress(x, config), Rescaled)


def test_all_zero_rows_in_a_shared_group_decode_as_exact_zeros():
    """Rows narrower than a group share it; an all-zero row must not take its neighbour's levels
    (KGIN's dead entities carry 1e12-scaled gradients that only exact zeros keep contained)."""
    x = torch.randn(40, 16)  # at 2 bits a group holds 4 rows of 16, at 1 bit 8 rows
    x[[2, 7]] = 0
    for bits in (1, 2):
        stored = compress(x, CompressionConfig(bits=bits))
        assert stored.live_rows is not None
        decoded = decompress(Compressed.rebuild(stored.meta(), stored.parts()))
        assert torch.equal(decoded[[2, 7]], torch.zeros(2, 16))
        assert (decoded[[0, 1, 3]] != 0).any()
        assert stored.nbytes == stored.quantized.nbytes + 5  # 40 row bits in five bytes
    assert compress(torch.randn(40, 16), CompressionConfig(bits=2)).live_rows is None
    wide = torch.randn(10, 64)
    wide[3] = 0
    assert compress(wide, CompressionConfig(bits=2)).live_rows is None  # one group per row


def test_a_linear_input_without_projection_shares_the_copy_other_ops_store():
    x = torch.randn(100, 64)
    with ActivationMeter():
        stored = compress(x, CompressionConfig(bits=2))
        assert compress(x, CompressionConfig(bits=2), project=True) is stored  # nothing projected
        wide = compress(x, CompressionConfig(bits=2).for_normalized())
        y = x * 2
        assert compress(y, CompressionConfig(bits=2).for_normalized()) is not wide
        assert compress(y, CompressionConfig(bits=2), project=True).quantized.bits == 4
        projecting = CompressionConfig(bits=2, projection_ratio=4)
        projected = compress(x, projecting, project=True)
        assert projected.projection is not None and projected is not compress(x, projecting)


def test_a_contiguous_view_of_stored_values_reads_the_same_codes_in_its_shape():
    weights = torch.rand(256, 8)  # 8 columns: blocks of whole rows, as for its unsqueezed view
    config = CompressionConfig(bits=2)
    with ActivationMeter():
        stored = compress(weights, config)
        view = compress(weights.unsqueeze(-1), config)
        assert view.quantized.codes is stored.quantized.codes
        assert torch.equal(decompress(view), decompress(stored).unsqueeze(-1))
        wide = torch.rand(16, 128)  # rows of 128: one group per row, but blocks once flattened
        rows = compress(wide, config)
        flat = compress(wide.view(-1), config)
        assert flat.quantized.codes is not rows.quantized.codes
        assert flat.quantized.layout.group_len != rows.quantized.layout.group_len
        strided = compress(weights.t(), config)  # not contiguous: its own copy
        assert strided.quantized.codes is not stored.quantized.codes
    assert compress(weights.unsqueeze(-1), config).quantized.codes is not stored.quantized.codes


@pytest.mark.parametrize(
    "width, config",
    [
        (64, CompressionConfig(bits=2)),  # one row to a group
        (16, CompressionConfig(bits=1)),  # several rows to a group (1 bit: groups of 64 or more)
        (64, CompressionConfig(bits=4, group_size=16)),  # several groups to a row
    ],
)
def test_rows_decode_only_their_groups_to_the_bits_of_the_whole(width, config):
    x = torch.randn(203, width, generator=torch.Generator().manual_seed(0))
    x[7] = 0.0  # a zero row: kept exact by `live_rows` where rows share a group
    stored = compress(x, config)
    whole = stored.decode()
    for start, stop in ((0, 203), (0, 1), (5, 9), (13, 120), (200, 203), (50, 50)):
        assert torch.equal(stored.rows(start, stop), whole[start:stop]), (start, stop)
    assert stored.by_rows
    assert stored.rows(0, 204) is None  # out of range


def test_rows_are_refused_where_the_codes_are_not_laid_out_by_rows():
    x = torch.randn(40, 24, generator=torch.Generator().manual_seed(1))
    across = compress(x, CompressionConfig(bits=2, group_size=16))  # groups cut across rows
    assert not across.by_rows and across.rows(0, 4) is None
    projected = compress(
        torch.randn(256, 64), CompressionConfig(bits=2, projection_ratio=4), project=True
    )
    assert isinstance(projected, Compressed) and projected.projection is not None
    assert not projected.by_rows and projected.rows(0, 4) is None


@pytest.mark.parametrize("width", [16, 64, 128])  # 4 rows to a group, one, 2 groups to a row
@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_take_rows_decodes_just_those_rows_with_the_whole_decode_s_bits(width, bits):
    x = torch.randn(300, width, generator=torch.Generator().manual_seed(bits))
    x[7] = 0  # a zero row: kept exact by `live_rows` where a group spans rows
    stored = compress(x, CompressionConfig(bits=bits))
    rows = torch.tensor([7, 3, 299, 3, 0, 150])
    assert torch.equal(stored.take_rows(rows), stored.decode()[rows])
    assert stored.take_rows(torch.zeros(0, dtype=torch.int64)).shape == (0, width)


@pytest.mark.parametrize("exact", [False, True])
def test_a_rescaled_tensor_s_rows_are_its_whole_decode_s_rows_bit_for_bit(exact):
    """A normalized layer output's input (`Rescaled`: y and the row norms) read by rows, as
    KGAT's whole-graph backward reads it; a norm below `least` is clamped as in `decode`."""
    generator = torch.Generator().manual_seed(4)
    y = torch.randn(300, 64, generator=generator)
    scale = torch.rand(300, 1, generator=generator) + 0.5
    scale[11] = 1e-20  # below least: clamped
    stored = Rescaled(y if exact else compress(y, CompressionConfig(bits=2)), scale, 1e-12)
    assert stored.by_rows
    whole = stored.decode()
    assert torch.equal(stored.rows(5, 140), whole[5:140])
    rows = torch.tensor([11, 3, 299, 3, 0])
    assert torch.equal(stored.take_rows(rows), whole[rows])


def test_a_rescaled_tensor_whose_codes_are_not_by_rows_is_not_read_by_rows():
    x = torch.randn(40, 24, generator=torch.Generator().manual_seed(5))
    across = compress(x, CompressionConfig(bits=2, group_size=16))  # groups cut across rows
    stored = Rescaled(across, torch.ones(40, 1), 0.0)
    assert not stored.by_rows
    assert stored.rows(0, 4) is None and stored.take_rows(torch.tensor([1])) is None
