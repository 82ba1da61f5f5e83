"""One contract per result table: its key, columns, dtypes and nullability, strict.

The stage that produces a result frame returns it validated by its contract (tasks.core), the
store writes exactly the contract's columns (db.store.results), and tests/test_contracts.py checks
every contract against the SQLAlchemy model of its table: a column in one and not the other, another
kind of value or another nullability fails. ``run_id`` is the store's and is in no contract.

Vocabulary: a comparison's quantities are ``<quantity>_group`` and ``<quantity>_reference``
(the group first); a rate is ``numerator / denominator``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa

from biasaudit.schemas.frames import COUNT_COLUMNS
from biasaudit.schemas.metric_ids import METRIC_IDS

SUBSETS = ["group", "rest"]

_PROBABILITY = pa.Check.in_range(0.0, 1.0)
_COUNT = pa.Check.ge(0)


def _is_text(values: pd.Series) -> pd.Series:
    """Each value text or null: at once where pandas infers the column as text (or all null)."""
    if pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty"):
        return pd.Series(True, index=values.index)
    text = np.fromiter((isinstance(v, str) for v in values), bool, len(values))
    return pd.Series(text | values.isna().to_numpy(dtype=bool), index=values.index)


def _text(*checks: pa.Check, nullable: bool = False) -> pa.Column:
    """Text; where it may be null, checked value by value (a column of nulls has no str dtype)."""
    if nullable:
        return pa.Column(None, [pa.Check(_is_text, name="text"), *checks], nullable=True)
    return pa.Column(str, list(checks))


def _real(*checks: pa.Check, nullable: bool = True) -> pa.Column:
    return pa.Column(float, list(checks), nullable=nullable)


def _reason() -> pa.Column:
    """Why a value is missing, or null where there is none."""
    return _text(nullable=True)


_METRIC = _text(pa.Check.isin(list(METRIC_IDS)))
_GROUP = {"attribute": _text(), "group_name": _text()}
_VERSUS = {**_GROUP, "reference": _text(), "metric": _METRIC}

# The keys results are joined on: a group against its reference (PAIR_KEY), one metric of that
# comparison (COMPARISON_KEY), one metric of a group (GROUP_METRIC_KEY).
PAIR_KEY = ["attribute", "group_name", "reference"]
COMPARISON_KEY = [*PAIR_KEY, "metric"]
GROUP_METRIC_KEY = ["attribute", "group_name", "metric"]

# The monitor's state carried from one increment to the next, per monitored comparison and metric
# (tasks.monitor; stored in monitor_results, read back by db.store.monitor).
MONITOR_STATE = [
    "nights",  # increments seen
    "log_m_up",  # log M+ (H0+: U <= tol)
    "log_m_down",  # log M- (H0-: U >= -tol)
    "w_k",  # exponentially weighted pairs (the bets' second moment m2)
    "w_d",  # ... weighted sum of k * D
    "w_v",  # ... weighted sum of k * (var + D^2)
    "cusum_up",  # G+: the up side's CUSUM
    "cusum_down",  # G-
    "run_y_up",  # S+: sum of Y over the pairs since G+ was last 0
    "run_y_down",
    "run_q_up",  # Q+: sum of Y^2 (expected) over those pairs
    "run_q_down",
    "gate_up",  # 1 while the up side bets (G+ reached GATE and has not returned to 0)
    "gate_down",
    "n_pairs",  # pairs so far (confidence sequence)
    "s_d",  # sum of k * D
    "s_v",  # sum of k * (var + D^2)
    "cs_a",  # sum k*lam
    "cs_b",  # sum k*lam*D
    "cs_c",  # sum k*lam^2*gamma
    "cs_dq",  # sum k*lam^2*gamma*D
    "cs_eq",  # sum k*lam^2*gamma*(var + D^2)
    "cs_low",  # running intersection of the CS
    "cs_high",
    "ebh_weight",  # e-BH's weight 1/pairs of the first night with pairs (0 before it)
]


def _contract(
    table: str, columns: dict[str, pa.Column], key: list[str], checks=None
) -> pa.DataFrameSchema:
    return pa.DataFrameSchema(columns, checks=checks, unique=key, strict=True, name=table)


GROUP_COUNTS = _contract(
    "group_counts",
    {
        **_GROUP,
        "subset": _text(pa.Check.isin(SUBSETS)),
        **{c: pa.Column("int64", _COUNT) for c in COUNT_COLUMNS},
        "n_unlabelled": pa.Column("int64", _COUNT),
        # the unlabelled predictions by decision (y_pred 1 / 0)
        "unlabelled_pos": pa.Column("int64", _COUNT),
        "unlabelled_neg": pa.Column("int64", _COUNT),
    },
    ["attribute", "group_name", "subset"],
    checks=pa.Check(
        lambda df: df["n_unlabelled"] == df["unlabelled_pos"] + df["unlabelled_neg"],
        name="unlabelled_split",
    ),
)
METRIC_RESULTS = _contract(
    "metric_results",
    {
        **_GROUP,
        "subset": _text(pa.Check.isin(SUBSETS)),
        "metric": _METRIC,
        # 'raw' for the observed counts; the smoothing stage adds its estimators
        "estimator": _text(pa.Check.isin(["raw", "cps", "additive"])),
        "value": _real(),
        "numerator": _real(),
        "denominator": _real(),
        "undefined_reason": _reason(),
    },
    ["attribute", "group_name", "subset", "metric", "estimator"],
    checks=pa.Check(
        lambda df: df["value"].isna() == df["undefined_reason"].notna(),
        name="undefined_iff_reason",
    ),
)
TWO_GROUP_RESULTS = _contract(
    "two_group_results",
    {**_VERSUS, "value": _real(), "undefined_reason": _reason()},
    list(_VERSUS),
)
MATCH_RESULTS = _contract(
    "match_results",
    {
        **_VERSUS,
        # the group's predictions MATCH draws: labelled ones, every valid one for PPR and PNR
        "predictions_group": pa.Column("int64", _COUNT),
        "percentile": _real(_PROBABILITY),
        "percentile_approx": _real(_PROBABILITY),
        "p_value": _real(_PROBABILITY),
        "p_adjusted": _real(_PROBABILITY),
        "method": _text(nullable=True),
        "reason": _reason(),
    },
    list(_VERSUS),
)
DETECTION_RESULTS = _contract(
    "detection_results",
    {
        **_VERSUS,
        "numerator_group": _real(_COUNT),
        "denominator_group": _real(_COUNT),
        "numerator_reference": _real(_COUNT),
        "denominator_reference": _real(_COUNT),
        "difference": _real(pa.Check.in_range(-1.0, 1.0)),
        "mean": _real(),
        "sd": _real(_COUNT),
        "direction": _text(nullable=True),
        "prob_deviation": _real(_PROBABILITY),
        "hdi_low": _real(),
        "hdi_high": _real(),
        # the HDI's mass 1 − alpha/m over the m tested rows; decision and simple_rule at it, on
        # tested rows only
        "hdi_mass": _real(_PROBABILITY, nullable=False),
        "decision": _text(nullable=True),
        "simple_rule": pa.Column("int64", pa.Check.isin([-1, 0, 1])),
        "z": _real(),
        "p_value": _real(_PROBABILITY),
        "p_adjusted": _real(_PROBABILITY),
        "test": _text(nullable=True),
        "flagged": pa.Column(bool),
        # the test's settings: H1 |difference| > tolerance, flagged at FDR alpha
        "tolerance": _real(pa.Check.in_range(0.0, 1.0), nullable=False),
        "alpha": _real(_PROBABILITY, nullable=False),
        "reason": _reason(),
    },
    list(_VERSUS),
)


def stated_decisions(detection: pd.DataFrame) -> pd.Series:
    """The HDI + ROPE decisions of stored detection rows that may be printed: those made at the
    run's joint mass (``hdi_mass`` set). Rows stored before migration 0019 hold decisions at
    1 − alpha each, made on untested rows too: stated as None."""
    return detection["decision"].where(detection["hdi_mass"].notna(), None)


PLANNING_RESULTS = _contract(
    "planning_results",
    {
        **_VERSUS,
        "value_group": _real(),
        "value_reference": _real(),
        "difference": _real(),
        "ratio": _real(),
        "tau": _real(),
        "size_group": _real(_COUNT, nullable=False),
        "size_reference": _real(_COUNT, nullable=False),
        "denominator_group": _real(_COUNT),
        "denominator_reference": _real(_COUNT),
        # the multiplicity-adjusted level at which detection's test is planned (alpha/m)
        "level": _real(_PROBABILITY),
        "needed": _real(_COUNT),
        "needed_neyman": _real(_COUNT),
        "neyman_share_group": _real(_PROBABILITY),
        "achieved_power": _real(_PROBABILITY),
        "power_method": _text(nullable=True),
        "verdict": _text(),
        "bias_n": _real(),
        "tolerance": _real(pa.Check.in_range(0.0, 1.0), nullable=False),
        "alpha": _real(_PROBABILITY, nullable=False),
        "reason": _reason(),
    },
    list(_VERSUS),
)
METAMETRIC_RESULTS = _contract(
    "metametric_results",
    {
        "attribute": _text(),
        "metric": _METRIC,
        "k": pa.Column("int64", _COUNT),
        "k_undefined": pa.Column("int64", _COUNT),
        # the rate's denominators of the groups kept: smallest, median, largest
        "denominator_min": _real(),
        "denominator_median": _real(),
        "denominator_max": _real(),
        "mm_diff": _real(),
        "mm_ratio": _real(),
        "max_abs_diff": _real(),
        "mad": _real(),
        "var": _real(),
        "gei": _real(),
        "corrected_var": _real(),
        "interval_low": _real(),
        "interval_high": _real(),
        # the interval's confidence level (1 - alpha)
        "confidence": _real(_PROBABILITY, nullable=False),
        "reason": _reason(),
    },
    ["attribute", "metric"],
)
COMPARISON_RESULTS = _contract(
    "comparison_results",
    {
        **_GROUP,
        "metric": _METRIC,
        "previous_run_id": pa.Column("int64"),
        "status": _text(pa.Check.isin(["both", "appeared", "vanished"])),
        "value_before": _real(),
        "value_after": _real(),
        "change": _real(),
        "p_value": _real(_PROBABILITY),
        "p_adjusted": _real(_PROBABILITY),
        "significant": pa.Column(bool),
        # the two runs' windows share data: changes reported, not tested
        "overlapping": pa.Column(bool, nullable=True),
        # the test's settings: H1 |change| > tolerance (always 0), significant at FDR alpha
        "tolerance": _real(pa.Check.in_range(0.0, 1.0), nullable=False),
        "alpha": _real(_PROBABILITY, nullable=False),
    },
    GROUP_METRIC_KEY,
)

_INT = pa.Column("int64", _COUNT)
SCORE_RESULTS = _contract(
    "score_results",
    {
        **_GROUP,
        "reference": _text(),
        **{
            f"{quantity}_{side}": column
            for side in ("group", "reference")
            for quantity, column in {
                "n": _INT,
                "positives": _INT,
                "negatives": _INT,
                "auc": _real(_PROBABILITY),
                "auc_variance": _real(pa.Check.ge(0)),
                "auc_low": _real(_PROBABILITY),
                "auc_high": _real(_PROBABILITY),
                # Cox recalibration: intercept with slope 1 (probabilities only) and slope
                "in_the_large": _real(),
                "slope": _real(),
            }.items()
        },
        "auc_p_value": _real(_PROBABILITY),
        "calibration_statistic": _real(pa.Check.ge(0)),
        "calibration_p_value": _real(_PROBABILITY),
        "auc_p_adjusted": _real(_PROBABILITY),
        "calibration_p_adjusted": _real(_PROBABILITY),
        "confidence": _real(_PROBABILITY, nullable=False),
    },
    PAIR_KEY,
)
CALIBRATION_RESULTS = _contract(
    "calibration_results",
    {
        **_GROUP,
        "score_bin": _real(nullable=False),
        # the bin's predictions with a known outcome (in the other score tables ``n`` counts
        # every valid prediction, labelled or not)
        "labelled": _INT,
        "positives": _INT,
        "mean_score": _real(),
        "observed_rate": _real(_PROBABILITY),
        "rate_low": _real(_PROBABILITY),
        "rate_high": _real(_PROBABILITY),
        "confidence": _real(_PROBABILITY, nullable=False),
    },
    ["attribute", "group_name", "score_bin"],
)
THRESHOLD_RESULTS = _contract(
    "threshold_results",
    {
        **_GROUP,
        "threshold": _real(nullable=False),
        **{c: _INT for c in ("n", "selected", "tp", "fp", "fn", "tn")},
        **{c: _real(_PROBABILITY) for c in ("selection_rate", "tpr", "fpr", "fnr")},
    },
    ["attribute", "group_name", "threshold"],
)
SCORING_RESULTS = _contract(
    "scoring_results",
    {
        **_GROUP,
        "n": _INT,
        "above_median": _INT,
        "median_score": _real(nullable=False),
        "sample_size": _INT,
    },
    ["attribute", "group_name"],
)

# The audit result's frames (tasks.core.AuditResult) and the contract of the table each fills.
CONTRACTS: dict[str, pa.DataFrameSchema] = {
    "counts": GROUP_COUNTS,
    "metrics": METRIC_RESULTS,
    "smoothed": METRIC_RESULTS,
    "two_group": TWO_GROUP_RESULTS,
    "match": MATCH_RESULTS,
    "detection": DETECTION_RESULTS,
    "planning": PLANNING_RESULTS,
    "metametrics": METAMETRIC_RESULTS,
    "comparison": COMPARISON_RESULTS,
    "scores": SCORE_RESULTS,
    "calibration": CALIBRATION_RESULTS,
    "thresholds": THRESHOLD_RESULTS,
    "scoring": SCORING_RESULTS,
}


def empty_result(frame_name: str) -> pd.DataFrame:
    """A frame of no rows with the contract's columns and dtypes (an audit without a score has
    no score results)."""
    columns = CONTRACTS[frame_name].columns
    return pd.DataFrame(
        {name: pd.Series(dtype=str(c.dtype) if c.dtype else object) for name, c in columns.items()}
    )


def validate_result(frame_name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` checked against the contract of the result frame ``frame_name`` (CONTRACTS),
    its columns in the contract's order."""
    schema = CONTRACTS[frame_name]
    return schema.validate(frame)[list(schema.columns)]
