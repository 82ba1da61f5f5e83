"""Score bins and counts per (group, score value, label): what the scan (db) and the score audit
(tasks.scores) share.

A scan counts the decision's score per distinct value (memory and stream modes), or, pushed down
into the database, per *cell*: each bin of the window split into SUBCELLS equal cells, a cell
named by its lower edge (:func:`cell_of`; a score with at most MAX_DISTINCT values keeps its
values). The AUC and the calibration test read these counts; the calibration curves and the
threshold sweep read them summed into the bins (:func:`rebinned`). A bin is one distinct score
value where the score has at most MAX_DISTINCT (COMPAS's deciles), else a decile bin of the
window's scores; a bin is named by its lower edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from biasaudit.schemas.config import INTERSECTION_SEP

# Score counts: one row per (attribute, group_name, score_bin), score_bin a value, a cell's lower
# edge or a bin's lower edge; labelled rows split by outcome,
# unlabelled rows counted apart (they count in selection rates only); score_sum is the labelled
# rows' total score (their mean score is score_sum / (positives + negatives)); above_median counts
# the rows, labelled or not, scoring strictly above the sample's median (tasks.ll144).
SCORE_COUNT_COLUMNS = [
    "attribute",
    "group_name",
    "score_bin",
    "positives",
    "negatives",
    "unlabelled",
    "score_sum",
    "above_median",
]
MAX_DISTINCT = 20  # a score with at most this many values is binned by value
QUANTILE_BINS = 10
QUANTILES = np.linspace(0, 1, QUANTILE_BINS + 1)[:-1]
# Push-down: cells per quantile bin. Pairs of a positive and a negative in one cell count 1/2 in
# the AUC, so the AUC from cells is within half the share of such pairs of the scores' own
# (tasks.scores.auc_cell_error); benchmarks/results/score_coverage.md measures it.
SUBCELLS = 4096


def quantile_positions(n: int) -> np.ndarray:
    """The sorted positions (0-based) of the lower edges among ``n`` scores: order statistics,
    so that a database finds them with ORDER BY ... OFFSET."""
    return np.floor(QUANTILES * (n - 1)).astype("int64")


def median_positions(n: int) -> list[int]:
    """The sorted positions (0-based) of the middle one of ``n`` scores, or of the middle two
    (whose mean is the median) where ``n`` is even."""
    return sorted({(n - 1) // 2, n // 2})


def score_edges(scores: np.ndarray) -> np.ndarray:
    """The bins' lower edges: the distinct values of a score with at most MAX_DISTINCT values,
    else the window's deciles (order statistics at quantile_positions, the lowest the minimum)."""
    scores = np.asarray(scores, dtype="float64")
    scores = scores[np.isfinite(scores)]
    values = np.unique(scores)
    if len(values) <= MAX_DISTINCT:
        return values
    return np.unique(np.sort(scores)[quantile_positions(len(scores))])


def bin_of(scores: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The lower edge of each score's bin (a score below the lowest edge falls in the first)."""
    index = np.searchsorted(edges, np.asarray(scores, dtype="float64"), side="right") - 1
    return edges[np.clip(index, 0, len(edges) - 1)]


@dataclass(frozen=True)
class ScoreBins:
    """What the window's scores decide for the counts: the bins' lower ``edges``, each bin's
    cell width ``steps`` (zeros where the score is binned by value) and the lowest and highest
    score, ``bottom`` and ``top``."""

    edges: np.ndarray
    steps: np.ndarray
    bottom: float
    top: float

    @property
    def probability(self) -> bool:
        """Whether every score lies in [0, 1] (then calibration compares it with outcomes)."""
        return bool(self.bottom >= 0 and self.top <= 1)


def score_bins(edges: np.ndarray, bottom: float, top: float, by_value: bool) -> ScoreBins:
    """The bins of scores from ``bottom`` to ``top`` with these lower ``edges``; a quantile
    bin's cells are its width (the last bin's up to ``top``) over SUBCELLS."""
    edges = np.asarray(edges, dtype="float64")
    if by_value or len(edges) == 0:
        return ScoreBins(edges, np.zeros(len(edges)), float(bottom), float(top))
    upper = np.append(edges[1:], max(float(top), float(edges[-1])))
    return ScoreBins(edges, (upper - edges) / SUBCELLS, float(bottom), float(top))


def bins_of_scores(scores: np.ndarray) -> ScoreBins:
    """The ScoreBins of these scores (their finite values)."""
    scores = np.asarray(scores, dtype="float64")
    finite = scores[np.isfinite(scores)]
    if not len(finite):
        return score_bins(np.array([]), np.nan, np.nan, True)
    by_value = len(np.unique(finite)) <= MAX_DISTINCT
    return score_bins(score_edges(finite), finite.min(), finite.max(), by_value)


def cell_index(scores: np.ndarray, bins: ScoreBins) -> np.ndarray:
    """Each score's cell in its bin: floor((score - edge) / step), in the order of operations
    of the push-down's SQL (db.sources.pushdown_sql), so that both put a score in the same cell; 0 by
    value."""
    values = np.asarray(scores, dtype="float64")
    edges, steps = bins.edges, bins.steps
    index = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 1)
    lower, step = edges[index], steps[index]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(step > 0, np.floor((values - lower) / step), 0.0)


def cell_of(scores: np.ndarray, bins: ScoreBins) -> np.ndarray:
    """The lower edge of each score's cell: its bin's lower edge plus its :func:`cell_index`
    steps (the score itself where the score is binned by value)."""
    values = np.asarray(scores, dtype="float64")
    edges, steps = bins.edges, bins.steps
    index = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 1)
    lower, step = edges[index], steps[index]
    return np.where(step > 0, lower + cell_index(values, bins) * step, values)


def score_counts(
    rows: pd.DataFrame,
    columns: list[list[str]],
    edges: np.ndarray,
    median: float,
    score: str = "score",
) -> pd.DataFrame:
    """Score counts (SCORE_COUNT_COLUMNS) of valid ``rows`` (``y_true`` 0/1 or missing, the
    ``score`` column and the attributes; pre-aggregated rows carry their count ``n``, their
    labelled rows' ``score_sum`` and their rows ``above_median``) for each attribute or
    intersection in ``columns``; ``median`` is the sample's median score."""
    weight = rows["n"] if "n" in rows else pd.Series(1, index=rows.index, dtype="int64")
    truth = rows["y_true"].astype("float64")
    values = rows[score].astype("float64")
    base = pd.DataFrame(
        {
            "score_bin": bin_of(values.to_numpy(), edges),
            "positives": weight.where(truth == 1, 0),
            "negatives": weight.where(truth == 0, 0),
            "unlabelled": weight.where(truth.isna(), 0),
            "score_sum": rows["score_sum"].astype("float64")
            if "score_sum" in rows
            else (values * weight).where(truth.notna(), 0.0),
            "above_median": rows["above_median"]
            if "above_median" in rows
            else weight.where(values > median, 0),
        },
        index=rows.index,
    )
    parts = []
    for names in columns:
        group = rows[names[0]].astype(str)
        for name in names[1:]:
            group = group + INTERSECTION_SEP + rows[name].astype(str)
        summed = base.groupby([group.rename("group_name"), "score_bin"], sort=True).sum()
        parts.append(summed.reset_index().assign(attribute=INTERSECTION_SEP.join(names)))
    if not parts:
        return pd.DataFrame(columns=SCORE_COUNT_COLUMNS)
    frame = pd.concat(parts, ignore_index=True)[SCORE_COUNT_COLUMNS]
    counts = ["positives", "negatives", "unlabelled", "above_median"]
    return frame.astype({**{c: "int64" for c in counts}, "score_sum": "float64"})


def rebinned(counts: pd.DataFrame, edges: np.ndarray) -> pd.DataFrame:
    """Score counts per value or cell summed into the bins whose lower ``edges`` are given."""
    if not len(counts):
        return counts
    keys = ["attribute", "group_name", "score_bin"]
    binned = counts.assign(score_bin=bin_of(counts["score_bin"].to_numpy(), edges))
    return binned.groupby(keys, sort=True, as_index=False).sum()[SCORE_COUNT_COLUMNS]


def summed(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Score counts of disjoint parts of the rows added up."""
    keys = ["attribute", "group_name", "score_bin"]
    frames = [p for p in parts if len(p)]
    if not frames:
        return pd.DataFrame(columns=SCORE_COUNT_COLUMNS)
    return (
        pd.concat(frames, ignore_index=True)
        .groupby(keys, sort=True, as_index=False)
        .sum()[SCORE_COUNT_COLUMNS]
    )
