"""The recommenders: KGAT, KGIN, KGCN and the LightGCN / BPR-MF baselines.

`build_model(name, dataset, config)` is what the trainer calls; every model follows the
`Recommender` contract of `base.py` and builds its forward from `tinykg_train.compress.ops`, so the
run's `CompressionConfig` (bits, group size, scheme) applies to every activation it saves.
"""

from __future__ import annotations

from tinykg_train.errors import ConfigError
from tinykg_train.model_defaults import check_extra_keys
from tinykg_train.models.base import EmbeddingRecommender, Recommender
from tinykg_train.models.bprmf import BPRMF
from tinykg_train.models.kgat import KGAT
from tinykg_train.models.kgcn import KGCN
from tinykg_train.models.kgin import KGIN
from tinykg_train.models.lightgcn import LightGCN

MODELS: dict[str, type[Recommender]] = {
    "kgat": KGAT,
    "kgin": KGIN,
    "kgcn": KGCN,
    "lightgcn": LightGCN,
    "bprmf": BPRMF,
}

__all__ = [
    "BPRMF",
    "KGAT",
    "KGCN",
    "KGIN",
    "MODELS",
    "EmbeddingRecommender",
    "LightGCN",
    "Recommender",
    "build_model",
]


def build_model(name: str, dataset, config) -> Recommender:
    """The model `name` for an opened `KGDataset` (or dataset dir) with `config`'s settings.

    Raises ConfigError for an unknown model or a `config.extra` key that no model reads.
    """
    from kg_data import KGDataset

    if name not in MODELS:
        raise ConfigError(f"unknown model {name!r}: choose one of {', '.join(MODELS)}")
    check_extra_keys(config.extra)
    if not isinstance(dataset, KGDataset):
        dataset = KGDataset.open(dataset)
    return MODELS[name](dataset, config)
