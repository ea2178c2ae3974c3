"""Training at scale: sampled subgraphs per step, and embedding tables updated row by row, on the
device or offloaded to host memory."""

from tinykg_train.scale.row_adam import adam_rows_, sparse_adam_step_size
from tinykg_train.scale.row_tables import RowTables
from tinykg_train.scale.step_rows import StepRows

__all__ = ["RowTables", "StepRows", "adam_rows_", "sparse_adam_step_size"]
