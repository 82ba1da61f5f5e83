"""Multiplicity control across the many tests of one audit (Benjamini-Hochberg; e-BH)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def bh_adjust(p_values: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values of the tests that were made (NaN = no test, kept)."""
    p_values = np.asarray(p_values, dtype=float)
    adjusted = np.full_like(p_values, np.nan)
    made = ~np.isnan(p_values)
    if made.any():
        adjusted[made] = stats.false_discovery_control(p_values[made], method="bh")
    return adjusted


def holm_adjust(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error at α under any dependence)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    steps = (p.size - np.arange(p.size)) * p[order]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(steps))
    return adjusted
