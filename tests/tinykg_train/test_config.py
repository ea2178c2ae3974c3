"""TrainConfig validation and YAML/override handling."""

from __future__ import annotations

import pytest

from tinykg_train.config import TrainConfig
from tinykg_train.errors import ConfigError


def test_defaults_are_valid_and_round_trip():
    config = TrainConfig(data="d")
    assert TrainConfig.from_dict(config.to_dict()) == config
    assert not config.compressed and config.with_overrides(bits=2).compressed


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"model": "gcn"}, "unknown model 'gcn'"),
        ({"bits": 3}, "'bits' must be one of 1, 2, 4, 8, 32"),
        ({"epochs": 0}, "'epochs' needs to be a positive integer"),
        ({"dropout": 1.0}, "'dropout' needs to be in [0, 1)"),
        ({"eval_ks": []}, "'eval_ks' needs positive cut-offs"),
        ({"device": "tpu"}, "'device' must be one of"),
    ],
)
def test_invalid_settings_raise_one_clear_line(override, message):
    with pytest.raises(
        ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")
    ):
        TrainConfig(data="d").with_overrides(**override)


def test_yaml_with_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: lightgcn\nbits: 4\neval_ks: [10, 20]\n")
    config = TrainConfig.from_yaml(path, {"bits": 2})
    assert (config.model, config.bits, config.eval_ks) == ("lightgcn", 2, (10, 20))


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.yaml", "model: [unclosed\n", "bad.yaml:"),
        (
            "bad.yaml",
            "model: kgat\nbits: 2\nlr: [0.1\nepochs: 3\n",
            r"bad.yaml:\d+: not valid YAML",
        ),
        ("u.yaml", "learning_rate: 0.1\n", "unknown setting"),
        ("list.yaml", "- model\n- kgat\n", "expected a mapping of setting: value, got list"),
        ("missing.yaml", None, "not found"),  # None: the file is never written
    ],
    ids=["unclosed", "names-the-line", "unknown-setting", "not-a-mapping", "missing"],
)
def test_bad_yaml_files_raise_one_clear_line(tmp_path, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_yaml(path)


def test_values_are_coerced_to_the_field_types(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-3\nepochs: 3.0\neval_ks: 50,20\ngroup_size: null\nout: runs/x\n")
    config = TrainConfig.from_yaml(path)  # YAML 1.1 reads 1e-3 as a string
    assert config.lr == 0.001 and isinstance(config.lr, float)
    assert config.epochs == 3 and isinstance(config.epochs, int)
    assert config.eval_ks == (20, 50) and config.group_size is None


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"epochs": "ten"}, "'epochs' needs an integer (got 'ten')"),
        ({"epochs": 2.5}, "'epochs' needs an integer (got 2.5)"),
        ({"bits": True}, "'bits' needs an integer (got True)"),
        ({"lr": "fast"}, "'lr' needs a number (got 'fast')"),
        ({"resume": "yes"}, "'resume' needs true or false"),
        ({"extra": [1]}, "'extra' needs a mapping"),
        ({"data": 3}, "'data' needs a string"),
        ({"group_size": 0}, "'group_size' needs to be a positive integer or null"),
    ],
)
def test_wrong_types_raise_one_clear_line(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainConfig(data="d").with_overrides(**override)


def test_an_empty_yaml_file_is_all_defaults(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert TrainConfig.from_yaml(empty, {"data": "d"}) == TrainConfig(data="d")


def test_quantization_levels_default_to_auto_and_the_choices_are_checked():
    assert TrainConfig(model="kgat").scheme == "auto"  # normal levels at 2 bits, uniform otherwise
    assert TrainConfig(model="kgat", scheme="uniform").scheme == "uniform"
    with pytest.raises(
        ConfigError, match=r"'scheme' must be one of uniform, normal, auto \(got 'gauss'\)"
    ):
        TrainConfig(model="kgat", scheme="gauss")


def test_score_and_normalize_bits_default_to_the_compression_defaults_and_reach_it():
    from tinykg_train.compression_defaults import DEFAULT_NORMALIZE_BITS, DEFAULT_SCORE_BITS

    defaults = TrainConfig(model="kgat")
    assert (defaults.score_bits, defaults.normalize_bits) == (
        DEFAULT_SCORE_BITS,
        DEFAULT_NORMALIZE_BITS,
    )
    config = TrainConfig(
        model="kgat", bits=2, group_size=128, scheme="uniform", score_bits=32, normalize_bits=8
    )
    compression = config.compression_config()
    assert (compression.bits, compression.group_size, compression.scheme) == (2, 128, "uniform")
    assert (compression.score_bits, compression.normalize_bits) == (32, 8)
    with pytest.raises(ConfigError, match=r"'score_bits' must be one of 1, 2, 4, 8, 32 \(got 3\)"):
        TrainConfig(model="kgat", score_bits=3)
    with pytest.raises(ConfigError, match=r"'normalize_bits' must be one of 1, 2, 4, 8, 32"):
        TrainConfig(model="kgat", normalize_bits=16)


def test_library_and_train_config_compression_defaults_are_one():
    """`CompressionConfig()` (the library) and a run's config without compression flags agree on
    every shared setting; at 2 bits both use normal levels (scheme auto)."""
    from tinykg_train.compress import CompressionConfig

    assert TrainConfig().compression_config() == CompressionConfig()
    assert TrainConfig(bits=2).compression_config() == CompressionConfig(bits=2)
    assert CompressionConfig(bits=2).levels == "normal"


def test_every_field_has_a_type_table():
    """A new field must be put in one table of config.py, or it would not be type-checked."""
    from tinykg_train import config as module

    tables = [
        module.INT_FIELDS, module.OPTIONAL_INT_FIELDS, module.FLOAT_FIELDS, module.STR_FIELDS,
        module.OPTIONAL_STR_FIELDS, module.BOOL_FIELDS, module.SPECIAL_FIELDS,
    ]  # fmt: skip
    for name in TrainConfig.field_names():
        homes = sum(name in table for table in tables)
        assert homes == 1, f"TrainConfig field {name!r} is in {homes} type tables of config.py"


def test_threads_is_auto_or_a_positive_integer_and_a_scheme_fits_its_bits():
    assert TrainConfig().threads is None and TrainConfig(threads="2").threads == 2
    with pytest.raises(
        ConfigError, match=r"'threads' needs to be a positive integer or null \(got 0\)"
    ):
        TrainConfig(threads=0)
    with pytest.raises(ConfigError, match="scheme 'normal' has 2-bit levels only \\(got bits=4\\)"):
        TrainConfig(bits=4, scheme="normal")


def test_sampling_settings_are_coerced_and_round_trip():
    config = TrainConfig(data="d", sampler="neighbor", n_layers=2, fanouts="10, -1")
    assert config.fanouts == (10, -1) and config.layer_fanouts == (10, -1)
    assert config.to_dict()["fanouts"] == [10, -1]
    assert TrainConfig.from_dict(config.to_dict()) == config
    assert TrainConfig(data="d", sampler="neighbor").layer_fanouts == (10, 10, 10)  # per layer
    assert TrainConfig(data="d").sampler == "none"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"sampler": "random"}, "'sampler' must be one of none, neighbor (got 'random')"),
        ({"fanouts": [5, 5, 5]}, "'fanouts' applies to sampled training only: add --sampler"),
        ({"sampler": "neighbor", "fanouts": [5, 5]}, "'fanouts' needs one count per layer: 3"),
        ({"sampler": "neighbor", "fanouts": [5, 0, 5]}, "positive neighbor counts or -1 for all"),
        ({"sampler": "neighbor", "fanouts": "5,x,5"}, "'fanouts' needs a list of neighbor counts"),
        ({"sampler": "neighbor", "fanouts": []}, "'fanouts' needs a list of neighbor counts"),
    ],
)
def test_bad_sampling_settings_raise_one_clear_line(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainConfig(data="d").with_overrides(**override)


def test_partitions_default_to_the_whole_graph_and_round_trip(tmp_path):
    assert TrainConfig(data="d").partitions == 1
    (tmp_path / "p.yaml").write_text("model: kgat\npartitions: 3\n")
    assert TrainConfig.from_yaml(tmp_path / "p.yaml", {"data": "d"}).partitions == 3
    config = TrainConfig(data="d", partitions="4", model="lightgcn")
    assert config.partitions == 4 and TrainConfig.from_dict(config.to_dict()) == config
    both = TrainConfig(data="d", partitions=2, sampler="neighbor", n_layers=2, fanouts=[5, 5])
    assert (both.partitions, both.sampler) == (2, "neighbor")  # neighbors sampled in a partition
    offloaded = TrainConfig(data="d", partitions=2, offload_embeddings=True)  # rows per partition
    assert (offloaded.partitions, offloaded.sampler, offloaded.row_wise_tables) == (2, "none", True)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"partitions": 0}, "'partitions' needs to be a positive integer (1 = whole graph) (got 0)"),
        ({"partitions": 2, "model": "bprmf"}, "BPR-MF has no graph to partition: drop --partitions"),
        ({"partitions": 2, "workers": 2}, "--partitions 2 runs in one process at fixed widths for now: drop --workers"),
        ({"partitions": 2, "bits": "auto"}, "--partitions 2 runs in one process at fixed widths for now: drop --bits auto"),
        ({"partitions": 2, "model": "kgcn"}, "KGCN draws a fixed number of neighbors per node: with --partitions add --sampler neighbor"),
    ],
)  # fmt: skip
def test_partitions_a_run_cannot_use_raise_one_clear_line(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainConfig(data="d").with_overrides(**override)
