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
