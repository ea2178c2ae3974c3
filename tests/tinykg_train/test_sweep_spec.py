"""SweepSpec: grid and random axes, trial counts, Tune spaces, and one-line errors for bad values."""

from __future__ import annotations

import math
import re

import pytest

from tinykg_train.errors import ConfigError
from tinykg_train.sweep.space import Axis
from tinykg_train.sweep.spec import Asha, SweepSpec, spec_from_mapping


def test_lists_are_grids_and_mappings_are_random_draws():
    spec = spec_from_mapping(
        {
            "train": {"epochs": 4},
            "space": {
                "model": ["kgat", "lightgcn"],
                "bits": [2, 32],
                "lr": {"loguniform": [1e-4, 1e-2]},
                "embed_dim": {"choice": [32, 64]},
                "n_layers": {"randint": [1, 4]},
                "dropout": {"uniform": [0.0, 0.3]},
            },
            "num_samples": 3,
        }
    )
    kinds = {axis.name: (axis.kind, axis.values) for axis in spec.axes}
    assert kinds == {
        "model": ("grid", ("kgat", "lightgcn")),
        "bits": ("grid", (2, 32)),
        "lr": ("loguniform", (1e-4, 1e-2)),
        "embed_dim": ("choice", (32, 64)),
        "n_layers": ("randint", (1, 4)),
        "dropout": ("uniform", (0.0, 0.3)),
    }
    assert spec.n_trials == 2 * 2 * 3  # random axes do not multiply; samples repeat the grid


def test_round_trip_and_trial_defining_parts():
    spec = SweepSpec(
        name="bits",
        train={"epochs": 3},
        axes=(Axis("bits", "grid", (2, 32)),),
        asha=Asha(grace_period=1, reduction_factor=3),
        max_concurrent=2,
    )
    assert SweepSpec.from_dict(spec.to_dict()) == spec
    relaxed = SweepSpec.from_dict({**spec.to_dict(), "max_concurrent": 4, "cpus_per_trial": 2})
    assert relaxed.trial_defining() == spec.trial_defining()  # how trials run may change on resume
    other = SweepSpec.from_dict({**spec.to_dict(), "num_samples": 2})
    assert other.trial_defining() != spec.trial_defining()


def test_max_epochs_follows_an_epochs_axis():
    assert SweepSpec(train={"epochs": 7}).max_epochs == 7
    assert SweepSpec(axes=(Axis("epochs", "grid", (3, 9)),)).max_epochs == 9
    assert SweepSpec(axes=(Axis("epochs", "randint", (2, 6)),)).max_epochs == 5


BAD_SPECS = [
    ({"space": {"bits": [2, 3]}}, "'bits' must be one of 1, 2, 4, 8, 32 or auto (got 3)"),
    ({"space": {"bits": []}}, "space.bits: needs a non-empty list"),
    ({"space": {"bits": [2, 2]}}, "space.bits: the same value is listed twice"),
    ({"space": {"colour": [1, 2]}}, "space.colour: unknown setting; sweepable: model, bits"),
    ({"space": {"data": ["a", "b"]}}, "space.data: cannot be swept"),
    ({"space": {"lr": {"loguniform": [0, 1e-2]}}}, "loguniform needs low > 0"),
    ({"space": {"lr": {"uniform": [1e-2, 1e-3]}}}, "space.lr.uniform: needs low < high"),
    ({"space": {"lr": {"uniform": [1e-3]}}}, "space.lr.uniform: needs [low, high] numbers"),
    ({"space": {"embed_dim": {"uniform": [16, 64]}}}, "embed_dim is not a float setting"),
    ({"space": {"lr": {"randint": [1, 4]}}}, "randint needs an integer setting"),
    ({"space": {"n_layers": {"randint": [3, 3]}}}, "needs integers low < high"),
    ({"space": {"lr": {"normal": [0, 1]}}}, "space.lr: expected a list of values (grid) or one of"),
    ({"space": {"lr": 0.1}}, "space.lr: expected a list of values"),
    ({"space": {"epochs": {"choice": [2, 0]}}}, "'epochs' needs to be a positive integer (got 0)"),
    ({"train": {"bits": 5}}, "'bits' must be one of"),
    (
        {"train": {"data": "x"}},
        "train: data cannot be set in a sweep config: pass the dataset with --data",
    ),
    ({"train": {"bits": 2}, "space": {"bits": [2, 32]}}, "bits: set both as a fixed train setting"),
    ({"colour": 1}, "sweep config: unknown key(s) colour; valid: name"),
    ({"resources": {"cpu": 1, "tpu": 1}}, "resources: unknown key(s) tpu"),
    ({"resources": {"cpu": 0}}, "'resources.cpu' needs to be > 0"),
    ({"resources": {"gpu": "one"}}, "'resources.gpu' needs a number"),
    ({"max_concurrent": 0}, "'max_concurrent' needs to be a positive integer or null"),
    ({"num_samples": 0}, "'num_samples' needs to be a positive integer"),
    ({"name": "a/b"}, "'name' needs to be a plain folder name"),
    (
        {"train": {"epochs": 2}, "asha": {"grace_period": 3}},
        "'asha.grace_period' (3) needs to be <= epochs (2)",
    ),
    (
        {"train": {"epochs": 9, "eval_every": 2}, "asha": {"grace_period": 3}},
        "a multiple of eval_every (2)",
    ),
    ({"asha": {"reduction_factor": 1}}, "'asha.reduction_factor' needs to be an integer >= 2"),
    ({"asha": {"patience": 1}}, "asha: unknown key(s) patience"),
    ({"train": {"device": "cuda"}}, "device cuda needs a GPU reserved per trial"),
    ({"space": {"device": ["cpu", "cuda"]}}, "device cuda needs a GPU reserved per trial"),
    ({"model_builder": "nowhere"}, "'model_builder' needs the form package.module:function"),
    ({"model_builder": "no_such_module_x:build"}, "cannot import no_such_module_x"),
    ({"model_builder": "tinykg_train.config:no_such_function"}, "has no function no_such_function"),
]


@pytest.mark.parametrize(("values", "message"), BAD_SPECS, ids=[m[:40] for _, m in BAD_SPECS])
def test_bad_specs_raise_one_line_that_names_the_problem(values, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        spec_from_mapping(values)
    assert "\n" not in str(caught.value)


def test_a_real_builder_reference_is_accepted():
    spec = spec_from_mapping({"model_builder": "tinykg_train.models:build_model"})
    assert spec.model_builder == "tinykg_train.models:build_model"


def test_describe_names_axes_and_trial_count():
    spec = spec_from_mapping({"space": {"bits": [2, 32], "seed": [0, 1, 2]}, "max_concurrent": 2})
    text = spec.describe()
    assert "6 trial(s)" in text and "bits=[2, 32]" in text and "2 at a time" in text
    assert math.prod(a.grid_size for a in spec.axes) == 6


@pytest.mark.parametrize("name", ["sweep.yaml", "sweep_random.yaml", "sweep_tiny.yaml"])
def test_the_shipped_configs_are_valid(repo_root, name):
    from tinykg_train.sweep.spec import load_spec

    spec = spec_from_mapping(load_spec(str(repo_root / "configs" / name)), source=name)
    assert spec.n_trials == {"sweep.yaml": 24, "sweep_random.yaml": 16, "sweep_tiny.yaml": 4}[name]


def test_cuda_with_a_reserved_gpu_is_accepted():
    spec = spec_from_mapping({"train": {"device": "cuda"}, "resources": {"gpu": 0.5}})
    assert spec.gpus_per_trial == 0.5


def test_bits_auto_and_memory_budget_are_sweep_axes():
    spec = spec_from_mapping(
        {"space": {"bits": ["auto", 2, 32]}, "train": {"model": "kgat"}},
    )
    assert spec.axes[0].values == ("auto", 2, 32) and spec.n_trials == 3
    budgets = spec_from_mapping(
        {"space": {"memory_budget": ["300MB", "1GiB"]}, "train": {"bits": "auto"}}
    )
    assert budgets.n_trials == 2
    with pytest.raises(ConfigError, match="'memory_budget' needs a positive size"):
        spec_from_mapping({"space": {"memory_budget": ["lots"]}, "train": {"bits": "auto"}})


def test_adam_state_is_a_sweep_axis_and_a_bad_form_is_one_line():
    spec = spec_from_mapping({"space": {"adam_state": ["float32", "bfloat16", "rowwise"]}})
    assert spec.axes[0].values == ("float32", "bfloat16", "rowwise") and spec.n_trials == 3
    with pytest.raises(ConfigError, match="'adam_state' must be one of float32, bfloat16, rowwise"):
        spec_from_mapping({"space": {"adam_state": ["int8"]}})
