"""kg_data: raw KG-recommendation files -> validated Parquet dataset dir -> graphs and samplers.

Imports no torch at module import time: ingest works with polars/pyarrow alone.
"""

__version__ = "0.1.0"
