"""Student-t quantiles for the paired 95% intervals the benchmark reports give (no scipy needed)."""

from __future__ import annotations

# Two-sided 95% quantiles of Student's t by degrees of freedom (1..30); beyond 30 the normal's.
T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` >= 1 degrees of freedom."""
    return T_975[df - 1] if df <= len(T_975) else 1.960
