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
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        TrainConfig(data="d").with_overrides(**override)


def test_yaml_with_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: lightgcn\nbits: 4\neval_ks: [10, 20]\n")
    config = TrainConfig.from_yaml(path, {"bits": 2})
    assert (config.model, config.bits, config.eval_ks) == ("lightgcn", 2, (10, 20))


def test_yaml_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml:"):
        TrainConfig.from_yaml(bad)
    unknown = tmp_path / "u.yaml"
    unknown.write_text("learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match="unknown setting"):
        TrainConfig.from_yaml(unknown)
    with pytest.raises(ConfigError, match="not found"):
        TrainConfig.from_yaml(tmp_path / "missing.yaml")
