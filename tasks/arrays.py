"""Flat layouts of ranges of different lengths, the vectorised stages' replacement for a loop
over groups: each range's values laid end to end."""

from __future__ import annotations

import numpy as np


def ragged(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """start[i], start[i] + 1, ..., start[i] + count[i] − 1 for every i, concatenated."""
    before = np.cumsum(count) - count
    return np.repeat(start - before, count) + np.arange(int(count.sum()))
