import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig, compress_saved_tensors, stack


def test_cached_values_live_only_inside_a_block_and_per_version():
    calls = []

    def make(t):
        calls.append(1)
        return t * 2

    x = torch.randn(8)
    stack.cached("double", x, make)
    stack.cached("double", x, make)
    assert len(calls) == 2  # outside any block: nothing is cached
    with ActivationMeter():
        first = stack.cached("double", x, make)
        assert stack.cached("double", x, make) is first
        assert stack.cached("other", x, make) is not first
        x.mul_(3)
        assert stack.cached("double", x, make) is not first
    assert len(calls) == 5
    assert not stack.active()


def test_a_dead_source_is_never_matched_by_a_new_tensor_at_its_address():
    with ActivationMeter():
        x = torch.randn(1000)
        stack.cached("kind", x, lambda t: "old")
        del x
        for _ in range(20):  # the allocator may hand the same address to a new tensor
            assert stack.cached("kind", torch.randn(1000), lambda t: "new") == "new"


def test_parameters_and_views_of_registered_storages_are_persistent():
    layer = torch.nn.Linear(4, 3)
    layer.register_buffer("table", torch.randn(5, 4))
    assert stack.is_persistent(layer.weight)
    assert not stack.is_persistent(layer.weight.detach().t())  # unknown outside a block
    with stack.pushed(stack.SavedTensorLayer(), stack.model_storages(layer)):
        assert stack.is_persistent(layer.weight.detach().t())
        assert stack.is_persistent(layer.table[2])
        assert not stack.is_persistent(layer.table.clone())


def saved_bytes(config_outer, config_inner, meter_innermost):
    """Bytes a meter counts for one Linear, with the meter inside or outside the compressors."""
    layer = torch.nn.Linear(64, 8)
    x = torch.randn(128, 64)
    meter = ActivationMeter(layer)
    with compress_saved_tensors(config_outer):
        if meter_innermost:
            with compress_saved_tensors(config_inner), meter:
                out = layer(x)
        else:
            with meter, compress_saved_tensors(config_inner):
                out = layer(x)
    assert out.requires_grad
    return meter.total_bytes


def test_the_innermost_compressor_encodes_and_meters_see_the_stored_form_in_any_nesting():
    two, eight = CompressionConfig(bits=2), CompressionConfig(bits=8)
    int2_row, int8_row = 64 // 4 + 4, 64 + 4  # codes + 16-bit scale and zero point per row
    assert saved_bytes(eight, two, True) == 128 * int2_row
    assert saved_bytes(eight, two, False) == 128 * int2_row
    assert saved_bytes(two, eight, True) == 128 * int8_row
    assert saved_bytes(two, CompressionConfig(), True) == 128 * 64 * 4  # bits=32 inside: off


def test_precompressed_blocks_store_tensors_as_they_are():
    x = torch.randn(100, 64, requires_grad=True)
    with (
        compress_saved_tensors(CompressionConfig(bits=2)),
        ActivationMeter() as meter,
        stack.precompressed(),
    ):
        out = x * x
    assert meter.total_bytes == x.numel() * 4
    assert out.requires_grad
