"""Sweep axes: grids and random draws parsed from YAML, values coerced and checked, Tune spaces."""

from __future__ import annotations

import pytest

from tinykg_train.errors import ConfigError
from tinykg_train.sweep.space import Axis, parse_axis, sweepable_settings
from tinykg_train.sweep.spec import SweepSpec


def test_values_are_coerced_like_train_settings():
    # YAML reads 1e-3 as a string and the command line gives strings: both become the field's type
    axis = parse_axis("lr", ["1e-3", "0.01"], {})
    assert axis.values == (1e-3, 0.01)
    assert parse_axis("bits", ["2", "32"], {}).values == (2, 32)


def test_tune_space_yields_every_grid_point_with_random_draws_in_bounds():
    from ray.tune.search.variant_generator import generate_variants

    spec = SweepSpec(
        axes=(
            Axis("bits", "grid", (2, 4, 32)),
            Axis("seed", "grid", (0, 1)),
            Axis("lr", "loguniform", (1e-4, 1e-2)),
            Axis("n_layers", "randint", (1, 3)),
        )
    )
    configs = [config for _, config in generate_variants(spec.param_space())]
    assert len(configs) == spec.n_trials == 6
    assert {(c["bits"], c["seed"]) for c in configs} == {(b, s) for b in (2, 4, 32) for s in (0, 1)}
    assert all(1e-4 <= c["lr"] < 1e-2 and c["n_layers"] in (1, 2) for c in configs)


def test_random_axes_do_not_multiply_the_grid():
    assert Axis("lr", "loguniform", (1e-4, 1e-2)).grid_size == 1
    assert Axis("bits", "grid", (2, 4, 32)).grid_size == 3
    assert Axis("n_layers", "randint", (1, 4)).highest() == 3


def test_per_run_settings_are_not_sweepable():
    assert {"data", "out", "resume", "extra"}.isdisjoint(sweepable_settings())
    with pytest.raises(ConfigError, match="space.out: cannot be swept"):
        parse_axis("out", ["a", "b"], {})


def test_sampled_training_is_a_sweep_axis():
    assert {"sampler", "fanouts"} <= set(sweepable_settings())
    assert parse_axis("sampler", ["none", "neighbor"], {}).values == ("none", "neighbor")
    train = {"sampler": "neighbor", "n_layers": 2}
    assert parse_axis("fanouts", ["5,5", [10, -1]], train).values == ((5, 5), (10, -1))
    with pytest.raises(ConfigError, match="'fanouts' needs one count per layer"):
        parse_axis("fanouts", ["5,5,5"], train)
