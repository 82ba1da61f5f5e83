"""Smoothing: Cross-Prior Smoothing and additive smoothing of small groups' counts.

Cross-Prior Smoothing (Briscoe et al., "Algorithmic Accountability in Small Data", section 6,
algorithm 1): for group i of a partition, the reference is the rest of the population
CM_ref = CM − CM_i, normalised to proportions q = CM_ref / n_ref, and the smoothed matrix is
CM'_i = n_i · (CM_i + λq)/(n_i + λ): λ pseudo-counts drawn from the reference, rescaled so the
group keeps its size. Per cell the estimate (x + λq)/(n + λ) has bias λ(q − p)/(n + λ) and
variance n·p(1 − p)/(n + λ)² (theorem 6.1).
Default λ = 5 (the paper's experiments use 5, 10 and 20; its code defaults to 1).

Additive (Laplace) smoothing adds a pseudo-count to every cell (1 is add-one); an empty group has
nothing to smooth and its additively smoothed metrics are undefined, with the reason.
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


def additive_smoothing(counts: pd.DataFrame, pseudocount: float = 1.0) -> pd.DataFrame:
    """Add ``pseudocount`` to every cell (Laplace smoothing; 1 is add-one). An empty group has no
    data to smooth: mark_empty_groups leaves its metrics undefined."""
    if pseudocount < 0:
        raise ValueError(f"pseudocount must be >= 0, got {pseudocount}")
    return counts.assign(**{c: counts[c].astype("float64") + pseudocount for c in COUNT_COLUMNS})


def smoothed_counts(
    groups: pd.DataFrame, lam: float = DEFAULT_LAMBDA, pseudocount: float = 1.0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(CPS-smoothed, additively smoothed) counts of every group; the unlabelled counts are
    carried unchanged (they enter PPR and PNR only). The core computes the metrics on them
    (tasks.metrics.compute_metrics) and passes the additive ones through mark_empty_groups."""
    return cross_prior_smoothing(groups, lam), additive_smoothing(groups, pseudocount)


EMPTY_GROUP = "empty group: no data to smooth (additive smoothing would report its prior)"


def mark_empty_groups(metrics: pd.DataFrame, groups: pd.DataFrame) -> pd.DataFrame:
    """Metrics of additively smoothed counts with every metric of an empty raw group undefined,
    with the reason (add-one would report TPR 1/2 of a group with no predictions)."""
    keys = ["attribute", "group_name"]
    size = groups[keys].assign(_n=groups[COUNT_COLUMNS].sum(axis=1).to_numpy())
    empty = metrics[keys].merge(size, on=keys, how="left")["_n"].to_numpy() == 0
    reason = np.where(empty, EMPTY_GROUP, metrics["undefined_reason"].astype(object))
    out = metrics.assign(value=np.where(empty, np.nan, metrics["value"]), undefined_reason=reason)
    out["undefined_reason"] = out["undefined_reason"].where(out["undefined_reason"].notna(), None)
    return out
