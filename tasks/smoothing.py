"""Smoothing: Cross-Prior Smoothing and additive smoothing of small groups' counts.

Cross-Prior Smoothing (small-data-metrics-match-cps.txt §6, algorithm 1; SPEC §4): for group i of a
partition, the reference is the rest of the population CM_ref = CM − CM_i, normalised to
proportions q = CM_ref / n_ref, and the smoothed matrix is CM'_i = n_i · (CM_i + λq)/(n_i + λ): λ
pseudo-counts drawn from the reference, rescaled so the group keeps its size. Per cell the estimate
(x + λq)/(n + λ) has bias λ(q − p)/(n + λ) and variance n·p(1 − p)/(n + λ)² (theorem 6.1).
Default λ = 5 (the paper's experiments use 5, 10 and 20; its code defaults to 1).

Additive (Laplace) smoothing adds α to every cell (α = 1 is add-one).
Smoothed metrics are reported beside the raw ones, never instead of them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from biasaudit.schemas.frames import COUNT_COLUMNS

DEFAULT_LAMBDA = 5.0


def cross_prior_smoothing(counts: pd.DataFrame, lam: float = DEFAULT_LAMBDA) -> pd.DataFrame:
    """CPS of every group of one partition (or of each ``attribute``'s partition, if present).

    Returns the same frame with float cells tp, fp, fn, tn. A group that is its whole partition
    has no reference and is returned unsmoothed.
    """
    if lam < 0:
        raise ValueError(f"lambda must be >= 0, got {lam}")
    cells = counts[COUNT_COLUMNS].astype("float64")
    if "attribute" in counts:
        total = cells.groupby(counts["attribute"]).transform("sum")
    else:
        total = pd.DataFrame(
            np.broadcast_to(cells.sum().to_numpy(), cells.shape),
            index=cells.index,
            columns=COUNT_COLUMNS,
        )
    reference = total - cells
    n_ref = reference.sum(axis=1).to_numpy()[:, None]
    n = cells.sum(axis=1).to_numpy()[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(n_ref > 0, reference.to_numpy() / n_ref, 0.0)
        weight = np.where(n_ref > 0, lam, 0.0)
        smoothed = np.where(n + weight > 0, n * (cells.to_numpy() + weight * q) / (n + weight), 0.0)
    return counts.assign(**dict(zip(COUNT_COLUMNS, smoothed.T)))


def additive_smoothing(counts: pd.DataFrame, alpha: float = 1.0) -> pd.DataFrame:
    """Add ``alpha`` pseudo-counts to every cell (Laplace smoothing; α = 1 is add-one)."""
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    return counts.assign(**{c: counts[c].astype("float64") + alpha for c in COUNT_COLUMNS})


def smoothed_counts(
    groups: pd.DataFrame, lam: float = DEFAULT_LAMBDA, alpha: float = 1.0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(CPS-smoothed, additively smoothed) counts of every group (metrics are computed on them)."""
    return cross_prior_smoothing(groups, lam), additive_smoothing(groups, alpha)
