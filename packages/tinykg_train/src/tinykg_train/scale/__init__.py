"""Training beyond one whole-graph step: sampled subgraphs (and, beside them, row-wise tables)."""
