"""Flat layouts of ranges of different lengths, the vectorised stages' replacement for a loop
over groups: each range's values laid end to end."""

from __future__ import annotations

import numpy as np


def ragged(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """start[i], start[i] + 1, ..., start[i] + count[i] − 1 for every i, concatenated."""
    before = np.cumsum(count) - count
    return np.repeat(start - before, count) + np.arange(int(count.sum()))


def distinct_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a 2-D array in lexicographic order, and each row's index among them:
    np.unique(values, axis=0, return_inverse=True), by a lexsort of the columns (several times
    faster: np.unique sorts the rows as opaque bytes)."""
    if not len(values):
        return values, np.zeros(0, "int64")
    order = np.lexsort(values.T[::-1])
    ordered = values[order]
    new = np.r_[True, np.any(ordered[1:] != ordered[:-1], axis=1)]
    inverse = np.empty(len(values), "int64")
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse
