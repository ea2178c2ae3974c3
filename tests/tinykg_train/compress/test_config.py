import dataclasses

import pytest
import torch

from tinykg_train.compress import CompressionConfig
from tinykg_train.compress.codec import compress
from tinykg_train.errors import ConfigError


def test_defaults_mean_no_compression_and_the_config_is_frozen():
    config = CompressionConfig()
    assert config.bits == 32 and not config.enabled
    assert CompressionConfig(bits=2).enabled
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.bits = 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bits": 3}, "'bits' must be one of 1, 2, 4, 8, 32"),
        ({"bits": 2, "group_size": 0}, "'group_size' needs to be a positive integer"),
        ({"bits": 2, "group_size": True}, "'group_size' needs to be a positive integer"),
        ({"scheme": "log"}, "'scheme' must be one of uniform, normal"),
        ({"bits": 4, "scheme": "normal"}, "scheme 'normal' has 2-bit levels only"),
        ({"projection_ratio": 1.0}, "'projection_ratio' needs to be > 1"),
        ({"min_numel": -1}, "'min_numel' needs to be an integer >= 0"),
        ({"score_bits": 3}, "'score_bits' must be one of 1, 2, 4, 8, 32"),
        ({"normalize_bits": 5}, "'normalize_bits' must be one of 1, 2, 4, 8, 32"),
    ],
)
def test_invalid_settings_raise_one_line_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message) as info:
        CompressionConfig(**kwargs)
    assert "\n" not in str(info.value)


def test_grouping_is_per_row_whole_rows_for_narrow_ones_and_blocks_for_vectors():
    config = CompressionConfig(bits=2)  # groups of >= 64 elements
    assert config.group_for((100, 64)) is None
    assert config.group_for((8, 100, 200)) is None
    assert config.group_for((100, 32)) == 64  # two whole rows share a scale
    assert config.group_for((100, 16)) == 64
    assert config.group_for((100, 48)) == 96
    assert config.group_for((1000, 3)) == 66
    assert config.group_for((1000,)) == 256  # per-edge weights: one outlier spoils one block
    assert CompressionConfig(bits=2, group_size=64).group_for((100, 64)) == 64


@pytest.mark.parametrize(("bits", "least"), [(1, 128), (2, 64), (4, 32), (8, 16)])
def test_groups_keep_scale_and_zero_within_a_quarter_of_the_codes(bits, least):
    config = CompressionConfig(bits=bits)
    assert config.min_group_numel == least
    assert least * bits >= 4 * 32
    assert config.group_for((10, 64)) == (None if least <= 64 else 128)


def test_auto_levels_are_normal_at_2_bits_and_uniform_otherwise():
    assert CompressionConfig(bits=2, scheme="auto").levels == "normal"
    assert [CompressionConfig(bits=b, scheme="auto").levels for b in (1, 4, 8, 32)] == [
        "uniform"
    ] * 4
    assert CompressionConfig(bits=2).levels == "normal"  # the default is auto, as TrainConfig's
    assert CompressionConfig(bits=2, scheme="normal").levels == "normal"


def test_auto_levels_reach_the_kernels():
    x = torch.randn(64, 64)
    stored = compress(x, CompressionConfig(bits=2, scheme="auto"))
    assert stored.quantized.scheme == "normal"
    assert compress(x, CompressionConfig(bits=4, scheme="auto")).quantized.scheme == "uniform"


def test_scored_embeddings_are_raised_to_score_bits_and_never_lowered():
    config = CompressionConfig(bits=2, scheme="normal", group_size=128)
    scores = config.for_scores()
    assert (scores.bits, scores.levels, scores.group_size) == (8, "uniform", 128)
    assert CompressionConfig(bits=2, score_bits=2).for_scores() == CompressionConfig(
        bits=2, score_bits=2
    )
    assert CompressionConfig(bits=8, score_bits=4).for_scores().bits == 8
    assert not CompressionConfig(bits=2, score_bits=32).for_scores().enabled
    assert CompressionConfig().for_scores() == CompressionConfig()  # FP32 stays FP32


def test_normalized_outputs_are_raised_to_normalize_bits():
    assert CompressionConfig(bits=2).for_normalized().bits == 4
    assert CompressionConfig(bits=2, normalize_bits=2).for_normalized().bits == 2
    assert CompressionConfig(bits=8).for_normalized().bits == 8
    assert not CompressionConfig(bits=1, normalize_bits=32).for_normalized().enabled
