"""The models' fixtures (the tiny synthetic dataset, small configs) for the adaptive-width tests."""

from tests.tinykg_train.models.conftest import make_config, tiny_dataset  # noqa: F401
