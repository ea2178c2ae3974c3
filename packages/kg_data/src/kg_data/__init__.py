"""kg_data: raw KG-recommendation files -> validated Parquet dataset dir -> graphs and samplers.

Imports no torch at module import time: ingest works with polars/pyarrow alone. Public names are
loaded lazily (PEP 562) so `import kg_data` stays cheap and pulls in only what is used.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Imported eagerly (not through the lazy table): `kg_data.ingest` is also the name of the submodule, and
# importing that submodule would otherwise replace the function with the module on this package.
# Polars and pyarrow only: this keeps `import kg_data` free of torch.
from kg_data.ingest import DatasetInfo, ingest  # noqa: E402

_EXPORTS = {
    "KGDataError": "kg_data.errors",
    "IngestError": "kg_data.errors",
    "KGDataset": "kg_data.dataset",
    "CKG": "kg_data.graph",
    "kg_neighbor_table": "kg_data.graph",
    "NeighborSampler": "kg_data.sampling",
    "SampledSubgraph": "kg_data.sampling",
    "BPRNegativeSampler": "kg_data.negatives",
    "KGNegativeSampler": "kg_data.negatives",
    "BPRBatches": "kg_data.batches",
    "KGBatches": "kg_data.batches",
    "SubgraphBatches": "kg_data.batches",
    "partition_edges": "kg_data.partition",
    "PartitionPlan": "kg_data.partition",
    "to_hetero_data": "kg_data.pyg",
    "to_homogeneous_data": "kg_data.pyg",
}

__all__ = ["__version__", "DatasetInfo", "ingest", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kg_data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
