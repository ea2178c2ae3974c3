"""Command-line overrides of a sweep config: comma lists become grid axes, single values fix a setting."""

from __future__ import annotations

import pytest

from tinykg_train.errors import ConfigError
from tinykg_train.sweep.overrides import apply_overrides, parse_assignment, split_list
from tinykg_train.sweep.spec import spec_from_mapping

CONFIG = {
    "name": "base",
    "train": {"epochs": 10, "lr": 0.01},
    "space": {"model": ["kgat", "lightgcn"], "bits": [2, 32]},
    "resources": {"cpu": 2},
    "asha": {"grace_period": 2},
}


def test_comma_list_replaces_an_axis_and_single_value_fixes_it():
    values = apply_overrides(
        CONFIG, axes={"bits": "1,2,4", "model": "kgat", "lr": "1e-3,1e-2", "seed": None}
    )
    spec = spec_from_mapping(values)
    axes = {axis.name: axis.values for axis in spec.axes}
    assert axes == {"bits": (1, 2, 4), "lr": (1e-3, 1e-2)}
    assert spec.train["model"] == "kgat" and "lr" not in spec.train
    assert spec.n_trials == 3 * 2


def test_set_epochs_and_top_level_keys():
    values = apply_overrides(
        CONFIG,
        settings=["batch_size=256", "bits=4"],
        top={
            "epochs": "3",
            "name": "mine",
            "max_concurrent": 2,
            "resources.gpu": 0.5,
            "experiment": None,
        },
    )
    spec = spec_from_mapping(values)
    assert spec.train["batch_size"] == 256 and spec.train["epochs"] == 3
    assert [a.name for a in spec.axes] == ["model"]  # --set bits=4 removed the bits axis
    assert (spec.name, spec.max_concurrent, spec.cpus_per_trial, spec.gpus_per_trial) == (
        "mine",
        2,
        2.0,
        0.5,
    )
    assert spec.max_epochs == 3


def test_asha_flag_turns_early_stopping_on_and_off():
    assert spec_from_mapping(apply_overrides(CONFIG, top={"asha": False})).asha is None
    assert spec_from_mapping(apply_overrides(CONFIG, top={"asha": True})).asha.grace_period == 2
    switched_on = spec_from_mapping(apply_overrides({}, top={"asha": True}))
    assert (switched_on.asha.grace_period, switched_on.asha.reduction_factor) == (1, 2)


def test_set_reads_yaml_and_puts_model_knobs_into_extra():
    values = apply_overrides(
        {"train": {"extra": {"edge_dropout": 0.3}}},
        settings=["independence_weight=1e-4", "max_batches_per_epoch=null", "batch_size=256"],
    )
    spec = spec_from_mapping(values)
    assert spec.train["extra"] == {"edge_dropout": 0.3, "independence_weight": 1e-4}
    assert spec.train["max_batches_per_epoch"] is None and spec.train["batch_size"] == 256


def test_the_config_mapping_is_not_modified():
    before = repr(CONFIG)
    apply_overrides(CONFIG, axes={"bits": "2"}, settings=["lr=0.1"], top={"asha": False})
    assert repr(CONFIG) == before


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: split_list("2,,32", "--bits"),
            "--bits: expected a value or a comma list like 2,32",
        ),
        (lambda: parse_assignment("batch_size"), "--set: expected KEY=VALUE"),
        (lambda: parse_assignment("=3"), "--set: expected KEY=VALUE"),
        (
            lambda: spec_from_mapping(apply_overrides({}, axes={"bits": "2,x"})),
            "'bits' needs an integer (got 'x')",
        ),
        (
            lambda: spec_from_mapping(apply_overrides({}, settings=["colour=red"])),
            "unknown setting(s) colour",
        ),
        (lambda: apply_overrides({"space": [1]}), "space: expected a mapping"),
        (
            lambda: spec_from_mapping(apply_overrides({}, settings=["independence_weight=lots"])),
            "'independence_weight' (in extra) needs a number >= 0 (got 'lots')",
        ),
        (
            lambda: spec_from_mapping({"train": {"extra": {"edge_drop": 0.1}}}),
            "unknown model setting(s) edge_drop in 'extra'",
        ),
        (lambda: parse_assignment("lr=[0.1"), "--set lr: '[0.1' is not a valid value"),
    ],
)
def test_bad_overrides_are_one_line_errors(call, message):
    with pytest.raises(ConfigError) as caught:
        call()
    assert message in str(caught.value) and "\n" not in str(caught.value)
