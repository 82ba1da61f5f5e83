"""Compare: what changed since the previous version of the same audit, and is it real?

For every attribute, group and metric of two runs: both estimates, the change, and, for rate
metrics, the two-sample test of the two runs' counts (tasks.detection.unfairness_test with
U_tol = 0: the Agresti-Caffo test that the rate moved), with Benjamini-Hochberg adjusted p-values
across all the tests of the comparison; groups that appeared or vanished are listed as such.

Two runs are tested against each other only when their data are disjoint:
overlapping windows (the last 30 days tonight and last night share 29 days) are dependent
samples, and a two-independent-samples test between them is invalid (blind in practice). For
overlapping runs the changes are reported untested (``status`` still says both, ``p_value`` is
empty and ``overlapping`` is set). "Previous" is the run with the previous as-of.

Score audits compare each group's AUC the same way (:func:`compare_scores`): the test of two
independent AUCs on the two runs' stored AUCs and DeLong variances, BH-adjusted across groups,
with both runs' intervals and calibration (in-the-large, slope) beside them, untested.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from biasaudit.schemas.metric_ids import RATE_METRICS
from biasaudit.schemas.results import GROUP_METRIC_KEY, empty_result
from biasaudit.tasks.detection import unfairness_test
from biasaudit.tasks.multiplicity import bh_adjust
from biasaudit.tasks.scores import independent_auc_test

# The test of a change has no tolerance: H1 is |change| > 0.
TOLERANCE = 0.0


# The previous run's id and group metrics, and optionally whether its window overlaps this one's.
Previous = tuple[int | None, pd.DataFrame] | tuple[int | None, pd.DataFrame, bool]


def windows_overlap(before: tuple, after: tuple) -> bool:
    """Whether two (start, end] windows share time (a start of None is the beginning of time)."""
    (start_1, end_1), (start_2, end_2) = before, after
    starts_before_end_2 = start_1 is None or _utc(start_1) < _utc(end_2)
    starts_before_end_1 = start_2 is None or _utc(start_2) < _utc(end_1)
    return starts_before_end_2 and starts_before_end_1


def _utc(moment):
    stamp = pd.Timestamp(moment)
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


def compare_metrics(
    before: pd.DataFrame, after: pd.DataFrame, alpha: float, overlapping: bool = False
) -> pd.DataFrame:
    """Outer comparison of two runs' per-group metrics (columns GROUP_METRIC_KEY, value, numerator,
    denominator); ``status`` is 'both', 'appeared' or 'vanished'. With ``overlapping`` (the
    runs share data) nothing is tested. Every row carries the test's settings: H1
    |change| > ``tolerance`` (TOLERANCE), significant at FDR ``alpha``."""
    columns = GROUP_METRIC_KEY + ["value", "numerator", "denominator"]
    merged = before[columns].merge(
        after[columns],
        on=GROUP_METRIC_KEY,
        how="outer",
        suffixes=("_before", "_after"),
        indicator=True,
    )
    status = merged.pop("_merge").map(
        {"both": "both", "left_only": "vanished", "right_only": "appeared"}
    )
    testable = (
        (not overlapping)
        & (status == "both")
        & merged["metric"].isin(RATE_METRICS)
        & (merged["denominator_before"] > 0)
        & (merged["denominator_after"] > 0)
    ).to_numpy()
    p = np.full(len(merged), np.nan)
    if testable.any():
        _, p[testable] = unfairness_test(
            merged.loc[testable, "numerator_after"],
            merged.loc[testable, "denominator_after"],
            merged.loc[testable, "numerator_before"],
            merged.loc[testable, "denominator_before"],
        )
    adjusted = bh_adjust(p)
    return pd.DataFrame(
        {
            **{k: merged[k] for k in GROUP_METRIC_KEY},
            "status": status.astype(str),
            "value_before": merged["value_before"],
            "value_after": merged["value_after"],
            "change": merged["value_after"] - merged["value_before"],
            "p_value": p,
            "p_adjusted": adjusted,
            "significant": testable & (adjusted < alpha),
            "overlapping": overlapping,
            "tolerance": TOLERANCE,
            "alpha": alpha,
        }
    )


# A group's own score statistics (the "_group" columns of score results): the same whatever its
# reference, so each is read from its row against the rest of the attribute.
SCORE_GROUP = ["auc", "auc_low", "auc_high", "in_the_large", "slope"]
SCORE_TEST = ["auc_variance", "positives", "negatives"]


def compare_scores(
    before: pd.DataFrame, after: pd.DataFrame, alpha: float, overlapping: bool = False
) -> pd.DataFrame:
    """Outer comparison of two runs' score results (db.store.models.ScoreResult) per (attribute,
    group): AUC before and after with their intervals, its change and the two-sided test of two
    independent AUCs (tasks.scores.independent_auc_test on the stored AUCs and DeLong variances),
    BH-adjusted across groups, and calibration-in-the-large and slope before and after
    (untested). ``status`` and ``overlapping`` as in :func:`compare_metrics`."""
    key = ["attribute", "group_name"]
    columns = [f"{c}_group" for c in SCORE_GROUP + SCORE_TEST]

    def own(results: pd.DataFrame) -> pd.DataFrame:
        rows = results[results["reference"] == "rest"]
        return rows[key + columns].rename(columns=lambda c: c.removesuffix("_group"))

    merged = own(before).merge(
        own(after), on=key, how="outer", suffixes=("_before", "_after"), indicator=True
    )
    status = merged.pop("_merge").map(
        {"both": "both", "left_only": "vanished", "right_only": "appeared"}
    )
    sides = [
        tuple(merged[f"{c}_{side}"].astype("float64") for c in ["auc", *SCORE_TEST])
        for side in ("before", "after")
    ]
    p = independent_auc_test(*sides)
    p[(status != "both").to_numpy() | overlapping] = np.nan
    adjusted = bh_adjust(p)
    values = {
        f"{c}_{side}": merged[f"{c}_{side}"] for c in SCORE_GROUP for side in ("before", "after")
    }
    return pd.DataFrame(
        {
            **{k: merged[k] for k in key},
            "status": status.astype(str),
            **{k: values[k] for k in ["auc_before", "auc_low_before", "auc_high_before"]},
            **{k: values[k] for k in ["auc_after", "auc_low_after", "auc_high_after"]},
            "change": merged["auc_after"] - merged["auc_before"],
            "p_value": p,
            "p_adjusted": adjusted,
            "significant": np.isfinite(p) & (adjusted < alpha),
            **{k: values[k] for k in values if not k.startswith("auc")},
            "overlapping": overlapping,
        }
    )


def compare_with_previous(
    previous: Previous,
    metrics: pd.DataFrame,
    *,
    alpha: float,
) -> pd.DataFrame:
    """This run's group metrics against the previous run's (empty when there is none); untested
    where the two runs' windows overlap (``previous``'s optional third item, from
    db.store.history.previous_run_metrics with an as-of)."""
    previous_run_id, before, *overlap = previous
    if previous_run_id is None:
        return empty_result("comparison")
    after = metrics[metrics["subset"] == "group"]
    changes = compare_metrics(before, after, alpha, overlapping=bool(overlap and overlap[0]))
    return changes.assign(previous_run_id=previous_run_id)
