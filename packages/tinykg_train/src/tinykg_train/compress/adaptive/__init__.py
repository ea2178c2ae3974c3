"""`bits: auto`: each quantized saved tensor's width chosen from its measured gradient sensitivity.

- `sites`: the quantized saves of a step, numbered in order, and the `WidthPlan` applied to them;
- `sensitivity`: per site, the gradient error its rounding adds, measured on a real batch;
- `allocate`: the widths of least predicted error within an average width or a byte budget;
- `controller`: `AdaptivePrecision`, which measures at scheduled epochs and applies the plans;
- `budget`: a step's memory (model state, activations, temporaries) against `memory_budget`.

Import the submodules directly: `codec` imports `sites` while the package initialises.
"""
