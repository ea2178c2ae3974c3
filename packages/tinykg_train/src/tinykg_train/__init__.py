"""tinykg_train: compressed-activation layers, KGNN models, trainer, evaluation, tracking, sweeps."""

__version__ = "0.1.0"
