"""Each model's own defaults and knob types: where they apply, that they agree with the models and
configs/<model>.yaml, and that every wrong knob value is a one-line error when the config is built."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tinykg_train.config import TrainConfig
from tinykg_train.errors import ConfigError
from tinykg_train.model_defaults import (
    KNOBS,
    MODEL_DEFAULTS,
    MODEL_FIELDS,
    extra_defaults,
    model_defaults,
)

# What a configs/<model>.yaml may set besides the model's own defaults: per-run settings.
RUN_SETTINGS = {"model", "bits", "epochs", "seed", "eval_ks", "patience"}


@pytest.mark.parametrize("model", sorted(MODEL_DEFAULTS))
def test_configs_model_yaml_holds_the_code_defaults(repo_root, model):
    shipped = yaml.safe_load((repo_root / "configs" / f"{model}.yaml").read_text())
    assert shipped["model"] == model
    assert set(shipped) - {"extra"} <= set(MODEL_FIELDS) | RUN_SETTINGS
    assert {k: v for k, v in shipped.items() if k in MODEL_FIELDS} == MODEL_DEFAULTS[model]
    config = TrainConfig.from_yaml(repo_root / "configs" / f"{model}.yaml")
    assert {k: v for k, v in config.extra.items()} == {
        k: extra_defaults(model)[k] for k in config.extra
    }
    built = TrainConfig.for_model(model)
    assert all(getattr(built, k) == getattr(config, k) for k in MODEL_FIELDS)


@pytest.mark.parametrize("model", sorted(MODEL_DEFAULTS))
def test_the_models_read_their_knobs_from_here(model):
    from tinykg_train.models import MODELS

    assert extra_defaults(model) == MODELS[model].EXTRA_DEFAULTS
    assert set(MODEL_DEFAULTS) == set(KNOBS) == set(MODELS)


def test_a_knob_name_means_the_same_in_every_model():
    seen = {}
    for knobs in KNOBS.values():
        for key, knob in knobs.items():
            assert seen.setdefault(key, knob) == knob, f"{key} has two different types"


def test_for_model_brings_the_models_defaults_and_settings_win():
    kgcn = TrainConfig.for_model("kgcn", data="d")
    assert (kgcn.embed_dim, kgcn.n_layers, kgcn.dropout, kgcn.batch_size) == (32, 1, 0.0, 1024)
    assert TrainConfig.for_model("kgcn", embed_dim=48).embed_dim == 48
    generic = TrainConfig(model="kgcn")  # plain construction keeps the generic defaults
    assert (generic.embed_dim, generic.n_layers, generic.dropout) == (64, 3, 0.1)
    assert TrainConfig.for_model("lightgcn").l2 == 1e-4
    with pytest.raises(ConfigError, match="unknown model 'gcn': choose one of kgat, kgin"):
        TrainConfig.for_model("gcn")


def test_layers_take_the_last_model_and_merge_extra():
    config = TrainConfig.layered(
        {"model": "kgat", "embed_dim": 16, "extra": {"edge_dropout": 0.2}},
        {"model": "kgin", "extra": {"independence": "cosine"}},
    )
    assert config.model == "kgin" and config.n_intents == 4 and config.embed_dim == 16
    assert config.extra == {"edge_dropout": 0.2, "independence": "cosine"}
    assert model_defaults("kgin") is not MODEL_DEFAULTS["kgin"]  # a copy


def test_yaml_strings_become_the_knob_types():
    """The crash of issue 19: YAML reads 1e-4 as a string, and KGIN failed in its first step."""
    config = TrainConfig.for_model(
        "kgin", extra={"independence_weight": "1e-4", "edge_dropout": "0.25"}
    )
    assert config.extra == {"independence_weight": 1e-4, "edge_dropout": 0.25}
    assert isinstance(config.extra["independence_weight"], float)
    kgat = TrainConfig(extra={"layer_dims": "32,16,8", "relation_dim": "16", "pretrained": None})
    assert kgat.extra == {"layer_dims": [32, 16, 8], "relation_dim": 16, "pretrained": None}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"independence_weight": "heavy"}, "'independence_weight' (in extra) needs a number >= 0 (got 'heavy')"),
        ({"independence_weight": True}, "'independence_weight' (in extra) needs a number"),
        ({"independence_weight": -1.0}, "'independence_weight' (in extra) needs a number >= 0 (got -1.0)"),
        ({"edge_dropout": 1.0}, "'edge_dropout' (in extra) needs a number in [0, 1) (got 1.0)"),
        ({"edge_dropout": None}, "'edge_dropout' (in extra) needs a number in [0, 1) (got None)"),
        ({"independence": "mutual"}, "'independence' (in extra) needs one of distance, cosine (got 'mutual')"),
        ({"layer_dims": [32, 0]}, "'layer_dims' (in extra) needs a list of integers >= 1 like [64, 32, 16], or null"),
        ({"layer_dims": "wide"}, "'layer_dims' (in extra) needs a list of integers"),
        ({"relation_dim": 2.5}, "'relation_dim' (in extra) needs an integer >= 1, or null (got 2.5)"),
        ({"negative_slope": [0.2]}, "'negative_slope' (in extra) needs a number (got [0.2])"),
        ({"pretrained": 3}, "'pretrained' (in extra) needs a string (got 3)"),
        ({"pretrained": " "}, "'pretrained' (in extra) needs a path, or null"),
    ],
)  # fmt: skip
def test_a_wrong_knob_is_one_line_naming_the_key(extra, message):
    with pytest.raises(ConfigError) as info:
        TrainConfig(extra=extra)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_models_check_knobs_given_by_a_config_of_another_kind():
    from tinykg_train.models import KGIN

    assert KGIN.read_extra({"edge_dropout": "0.3", "layer_dims": [8]})["edge_dropout"] == 0.3
    with pytest.raises(ConfigError, match="'edge_dropout' \\(in extra\\) needs a number in"):
        KGIN.read_extra({"edge_dropout": 2})


def test_unknown_keys_reach_a_builder_of_your_own_but_the_models_refuse_them():
    assert TrainConfig(extra={"kg_phase": True}).extra == {"kg_phase": True}
    from tinykg_train.model_defaults import check_extra_keys

    with pytest.raises(ConfigError, match="unknown model setting\\(s\\) layer_dim in 'extra'"):
        check_extra_keys({"layer_dim": [8]})


def test_the_config_modules_import_no_torch():
    code = (
        "import sys\n"
        "import tinykg_train.config, tinykg_train.model_defaults, tinykg_train.threads\n"
        "import tinykg_train.compression_defaults\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'torch')\n"
        "assert not bad, bad[:5]\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
