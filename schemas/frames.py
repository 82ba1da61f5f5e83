"""Pandera schemas of the frames that cross stage boundaries.

Predictions are checked value by value (no dtype coercion; numeric checks coerce what they read and
fail what does not convert), so that every bad value, of any type, becomes a row-level failure that
can be quarantined with its rule, instead of one frame-level error that loses the rows.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pandera.pandas as pa
from biasaudit.schemas.metric_ids import METRIC_IDS

BINARY = [0, 1]
COUNT_COLUMNS = ["tp", "fp", "fn", "tn"]


def _non_empty_text(series):
    return series.astype("string").str.strip().str.len() > 0


CLOCK_SKEW = timedelta(minutes=5)


def _timestamp(series):
    return pd.to_datetime(series, errors="coerce", utc=True, format="mixed").notna()


def _not_in_future(now: datetime):
    def check(series):
        moment = pd.to_datetime(series, errors="coerce", utc=True, format="mixed")
        return moment.isna() | (moment <= now + CLOCK_SKEW)  # unparsable: the timestamp check

    return check


def _binary(series):
    return pd.to_numeric(series, errors="coerce").isin(BINARY)


def _unit_interval(series):
    return pd.to_numeric(series, errors="coerce").between(0.0, 1.0)


def predictions_schema(attributes: list[str], now: datetime | None = None) -> pa.DataFrameSchema:
    """Schema of extracted predictions: canonical columns plus one column per sensitive attribute.

    Timestamps later than ``now`` (default: the wall clock) plus 5 minutes of clock skew fail.
    """
    now = now or datetime.now(UTC)
    columns = {
        "prediction_id": pa.Column(
            nullable=False,
            unique=True,
            report_duplicates="exclude_first",
            checks=pa.Check(_non_empty_text, element_wise=False, name="non_empty"),
        ),
        "model_id": pa.Column(nullable=False),
        "model_version": pa.Column(nullable=True),
        "predicted_at": pa.Column(
            nullable=False,
            checks=[
                pa.Check(_timestamp, element_wise=False, name="timestamp"),
                pa.Check(_not_in_future(now), element_wise=False, name="not_in_future"),
            ],
        ),
        "y_true": pa.Column(nullable=True, checks=pa.Check(_binary, name="binary")),
        "y_pred": pa.Column(nullable=False, checks=pa.Check(_binary, name="binary")),
        "score": pa.Column(nullable=True, checks=pa.Check(_unit_interval, name="in_unit_interval")),
    }
    for attribute in attributes:
        columns[attribute] = pa.Column(
            nullable=False,
            checks=pa.Check(_non_empty_text, element_wise=False, name="non_empty"),
        )
    return pa.DataFrameSchema(columns, strict=False, name="predictions")


def _keys(**extra) -> dict[str, pa.Column]:
    return {
        "attribute": pa.Column(str),
        "group_name": pa.Column(str),
        "subset": pa.Column(str, pa.Check.isin(["group", "rest"])),
        **extra,
    }


COUNTS = pa.DataFrameSchema(
    _keys(
        **{c: pa.Column("int64", pa.Check.ge(0)) for c in COUNT_COLUMNS},
        n_unlabelled=pa.Column("int64", pa.Check.ge(0)),
        unlabelled_pos=pa.Column("int64", pa.Check.ge(0)),
        unlabelled_neg=pa.Column("int64", pa.Check.ge(0)),
    ),
    checks=pa.Check(
        lambda df: df["n_unlabelled"] == df["unlabelled_pos"] + df["unlabelled_neg"],
        name="unlabelled_split",
    ),
    unique=["attribute", "group_name", "subset"],
    name="counts",
)

METRICS = pa.DataFrameSchema(
    {
        "metric": pa.Column(str, pa.Check.isin(list(METRIC_IDS))),
        "value": pa.Column(float, nullable=True),
        "numerator": pa.Column(float, nullable=True),
        "denominator": pa.Column(float, nullable=True),
        "undefined_reason": pa.Column(object, nullable=True),
    },
    checks=pa.Check(
        lambda df: df["value"].isna() == df["undefined_reason"].notna(),
        name="undefined_iff_reason",
    ),
    strict=False,
    name="metrics",
)


# Result frames of the audit core (tasks.core.AuditResult), one schema each. Columns hold the names
# of their result tables; ``strict=False`` lets a stage carry a column more than its table keeps.
_COMPARISON_KEYS = {
    "attribute": pa.Column(str),
    "group_name": pa.Column(str),
    "reference": pa.Column(str),
    "metric": pa.Column(str, pa.Check.isin(list(METRIC_IDS))),
}
_PROBABILITY = pa.Check.in_range(0.0, 1.0)


def _result(name: str, columns: dict[str, pa.Column], unique: list[str]) -> pa.DataFrameSchema:
    return pa.DataFrameSchema(columns, unique=unique, strict=False, name=name)


TWO_GROUP = _result(
    "two_group",
    {
        **_COMPARISON_KEYS,
        "value": pa.Column(float, nullable=True),
        "undefined_reason": pa.Column(nullable=True),
    },
    list(_COMPARISON_KEYS),
)
MATCH = _result(
    "match",
    {
        **_COMPARISON_KEYS,
        "n": pa.Column("int64", pa.Check.ge(0)),
        "percentile": pa.Column(float, _PROBABILITY, nullable=True),
        "p_value": pa.Column(float, _PROBABILITY, nullable=True),
        "p_adjusted": pa.Column(float, _PROBABILITY, nullable=True),
        "method": pa.Column(nullable=True),
        "reason": pa.Column(nullable=True),
    },
    list(_COMPARISON_KEYS),
)
DETECTION = _result(
    "detection",
    {
        **_COMPARISON_KEYS,
        "difference": pa.Column(float, pa.Check.in_range(-1.0, 1.0), nullable=True),
        "prob_deviation": pa.Column(float, _PROBABILITY, nullable=True),
        "hdi_low": pa.Column(float, nullable=True),
        "hdi_high": pa.Column(float, nullable=True),
        "p_value": pa.Column(float, _PROBABILITY, nullable=True),
        "p_adjusted": pa.Column(float, _PROBABILITY, nullable=True),
        "flagged": pa.Column(bool),
        "test": pa.Column(nullable=True),
        "reason": pa.Column(nullable=True),
    },
    list(_COMPARISON_KEYS),
)
PLANNING = _result(
    "planning",
    {
        **_COMPARISON_KEYS,
        "needed": pa.Column(float, pa.Check.ge(0), nullable=True),
        "achieved_power": pa.Column(float, _PROBABILITY, nullable=True),
        "level": pa.Column(float, _PROBABILITY, nullable=True),
        "verdict": pa.Column(str),
        "reason": pa.Column(nullable=True),
    },
    list(_COMPARISON_KEYS),
)
SMOOTHED = METRICS.add_columns(
    {
        "attribute": pa.Column(str),
        "group_name": pa.Column(str),
        "estimator": pa.Column(str, pa.Check.isin(["cps", "additive"])),
    }
)
METAMETRICS = _result(
    "metametrics",
    {
        "attribute": pa.Column(str),
        "metric": pa.Column(str, pa.Check.isin(list(METRIC_IDS))),
        "k": pa.Column("int64", pa.Check.ge(0)),
        "reason": pa.Column(nullable=True),
    },
    ["attribute", "metric"],
)
COMPARISON = _result(
    "comparison",
    {
        "attribute": pa.Column(str),
        "group_name": pa.Column(str),
        "metric": pa.Column(str, pa.Check.isin(list(METRIC_IDS))),
        "status": pa.Column(str, pa.Check.isin(["both", "appeared", "vanished"])),
        "p_value": pa.Column(float, _PROBABILITY, nullable=True),
        "p_adjusted": pa.Column(float, _PROBABILITY, nullable=True),
        "significant": pa.Column(bool),
    },
    ["attribute", "group_name", "metric"],
)
CELLS = pa.DataFrameSchema(
    {
        "y_true": pa.Column(float, pa.Check.isin([0.0, 1.0]), nullable=True),
        "y_pred": pa.Column("int64", pa.Check.isin([0, 1])),
        "n": pa.Column("int64", pa.Check.gt(0)),
    },
    strict=False,
    name="cells",
)
FRAME_SCHEMAS = {
    "cells": CELLS,
    "counts": COUNTS,
    "metrics": METRICS,
    "two_group": TWO_GROUP,
    "match": MATCH,
    "detection": DETECTION,
    "planning": PLANNING,
    "smoothed": SMOOTHED,
    "metametrics": METAMETRICS,
    "comparison": COMPARISON,
}


def validate_frame(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` checked against the schema of the stage boundary ``name`` (FRAME_SCHEMAS)."""
    return FRAME_SCHEMAS[name].validate(frame)
