"""Multiplicity control across the many tests of one audit (Benjamini-Hochberg; e-BH)."""

from __future__ import annotations

import numpy as np


def bh_adjust(p_values: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values of the tests that were made (NaN = no test, kept):
    min over j >= i of p_(j)·m/j in rank order, at most 1: scipy.stats.false_discovery_control's
    "bh" to the last bit (tests/test_multiplicity.py), without importing scipy.stats
(tasks.distributions)."""
    p_values = np.asarray(p_values, dtype=float)
    flat = p_values.ravel()
    adjusted = np.full_like(flat, np.nan)
    made = np.flatnonzero(~np.isnan(flat))
    if len(made):
        order = np.argsort(flat[made], kind="stable")
        steps = flat[made][order] * (len(made) / np.arange(1, len(made) + 1))
        adjusted[made[order]] = np.minimum(1.0, np.minimum.accumulate(steps[::-1])[::-1])
    return adjusted.reshape(p_values.shape)


def holm_adjust(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error at α under any dependence)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    steps = (p.size - np.arange(p.size)) * p[order]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(steps))
    return adjusted
