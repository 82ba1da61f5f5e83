"""Pandera schemas of the frames that cross stage boundaries.

Predictions are checked value by value (no dtype coercion; numeric checks coerce what they read and
fail what does not convert), so that every bad value, of any type, becomes a row-level failure that
can be quarantined with its rule, instead of one frame-level error that loses the rows.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import numpy as np
import pandas as pd
import pandera.pandas as pa

from biasaudit.schemas.grammar import (
    CLOCK_SKEW,
    DECIMAL_TEXT,
    EARLIEST,
    ISO_TIMESTAMP,
    NAN_TEXT,
    NUMBER_PAD,
)
from biasaudit.schemas.metric_ids import METRIC_IDS

BINARY = [0, 1]
COUNT_COLUMNS = ["tp", "fp", "fn", "tn"]
# What a text value must hold besides spaces to count as non-empty (SQL TRIM strips spaces only).
PAD = " "
# The reason a label or decision is quarantined with: the rule and the values it accepts.
BINARY_RULE = "binary: 0/1 or true/false"
# The rule of a score that is NaN (kept apart from a missing score).
NOT_NAN = "not_nan"
# Names an error message lists; a frame may have hundreds of columns, an attribute thousands of
# groups.
SHOWN_NAMES = 20


def listed(names) -> str:
    """``names`` as a quoted, comma-separated list: the first SHOWN_NAMES and how many more."""
    names = list(names)
    shown = ", ".join(repr(n) for n in names[:SHOWN_NAMES])
    more = len(names) - SHOWN_NAMES
    return shown + (f", ... and {more} more" if more > 0 else "")


def _typed(series: pd.Series) -> bool:
    """Whether ``series`` has a dtype (not object) that the checks read without a per-value loop."""
    return not pd.api.types.is_object_dtype(series.dtype)


def _is_text_dtype(series: pd.Series) -> bool:
    return pd.api.types.is_string_dtype(series.dtype) and _typed(series)


def _is_integer_dtype(series: pd.Series) -> bool:
    return pd.api.types.is_integer_dtype(series.dtype)


def text_of(series: pd.Series) -> pd.Series:
    """``canonical_text`` as a pandas string series (missing values NA), vectorised for text,
    integer and boolean dtypes."""
    if _is_text_dtype(series):
        return series.astype("string")
    if _is_integer_dtype(series):
        return series.astype("string")
    if pd.api.types.is_bool_dtype(series.dtype):
        words = np.where(series.fillna(False).to_numpy(dtype=bool), "true", "false")
        return pd.Series(words, index=series.index, dtype="string").where(series.notna())
    return canonical_text(series).astype("string")


def canonical_text(series: pd.Series) -> pd.Series:
    """Attribute values as the strings they are: text unchanged, numbers in one canonical form
    (``1`` for 1, 1.0 and Decimal('1.00'), since SQL groups equal numbers together), booleans as
    ``true``/``false``; missing values stay missing."""
    if (
        _is_text_dtype(series)
        or _is_integer_dtype(series)
        or pd.api.types.is_bool_dtype(series.dtype)
    ):
        typed = text_of(series).astype(object)
        return typed.where(typed.notna(), None)

    def text(value):
        if value is None or value is pd.NA or value is pd.NaT:
            return None
        if isinstance(value, str):
            return value
        if isinstance(value, (bool, np.bool_)):
            return "true" if value else "false"
        if isinstance(value, (int, np.integer)):
            return str(int(value))
        if isinstance(value, Decimal):
            if not value.is_finite():
                return None if value.is_nan() else str(value)
            return format(value.normalize(), "f") if value else "0"
        if isinstance(value, (float, np.floating)):
            if np.isnan(value):
                return None
            return str(int(value)) if float(value).is_integer() else repr(float(value))
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        return str(value)

    return pd.Series(
        [text(v) for v in series.to_numpy(dtype=object)], index=series.index, dtype=object
    )


def non_empty_text(series):
    """Values that are present and hold more than spaces (as canonical text)."""
    text = text_of(series)
    return text.notna() & (text.str.strip(PAD).str.len() > 0).fillna(False).astype(bool)


def _as_float(series: pd.Series) -> pd.Series:
    """A numeric series as float64, missing values NaN."""
    values = series.to_numpy(dtype="float64", na_value=np.nan)
    return pd.Series(values, index=series.index)


def _decimal_text(text: pd.Series) -> pd.Series:
    """Text (a pandas string series) in the DECIMAL_TEXT grammar as float, else NaN."""
    matched = text.where(text.str.fullmatch(DECIMAL_TEXT).fillna(False).astype(bool))
    return pd.to_numeric(matched.str.strip(NUMBER_PAD), errors="coerce").astype("float64")


def as_number(series: pd.Series, finite: bool = True) -> pd.Series:
    """Finite numbers of ``series`` as float (NaN where a value is no finite number; with
    ``finite`` false infinities kept): numbers as they are, booleans, NaN and missing values not
    numbers, text only in the DECIMAL_TEXT grammar."""
    if finite:
        values = _numbers(series)
        return values.where(np.isfinite(values))
    if _LAST_NUMBER[0] is not series:  # the score's checks ask of one column in turn
        _LAST_NUMBER[:] = [series, _numbers(series)]
    values = _LAST_NUMBER[1]
    return values.where(values.notna())


def _numbers(series: pd.Series) -> pd.Series:
    """as_number's values, infinities kept."""
    if pd.api.types.is_bool_dtype(series.dtype):
        return pd.Series(np.nan, index=series.index)
    if pd.api.types.is_numeric_dtype(series.dtype):
        values = _as_float(series)
    elif _is_text_dtype(series):
        values = _decimal_text(series.astype("string"))
    elif pd.api.types.infer_dtype(series, skipna=True) in _NUMBERS_ONLY:  # a driver's numbers
        values = pd.to_numeric(series.astype(object), errors="coerce").astype("float64")
    else:
        objects = series.astype(object)
        is_text = objects.map(lambda v: isinstance(v, str))
        is_number = objects.map(
            lambda v: (
                isinstance(v, (int, float, Decimal, np.integer, np.floating))
                and not isinstance(v, (bool, np.bool_))
            )
        )
        parsed = _decimal_text(objects.where(is_text, None).astype("string"))
        numbers = pd.to_numeric(objects.where(is_number, None), errors="coerce")
        values = parsed.where(is_text, numbers.astype("float64"))
    return values


def as_binary(series: pd.Series) -> pd.Series:
    """0/1 labels and decisions as float 0.0/1.0 (NaN where the value is not 0/1): booleans,
    the numbers 0 and 1, and the text ``0``/``1`` (spaces around allowed), ``true``/``false``."""
    if pd.api.types.is_bool_dtype(series.dtype) or pd.api.types.is_numeric_dtype(series.dtype):
        value = _as_float(series)
    elif _is_text_dtype(series):
        stripped = series.astype("string").str.strip(PAD)
        lower = stripped.str.lower()
        words = pd.Series(np.nan, index=series.index)
        words = words.mask(lower.eq("true").fillna(False).astype(bool), 1.0)
        words = words.mask(lower.eq("false").fillna(False).astype(bool), 0.0)
        value = words.fillna(as_number(stripped))
    elif all(type(v) in (int, float) or v is None for v in series):  # a driver's numbers
        value = _as_float(series)
    else:
        objects = series.astype(object)
        booleans = objects.map(lambda v: float(v) if isinstance(v, (bool, np.bool_)) else np.nan)
        words = objects.map(
            lambda v: (
                {"true": 1.0, "false": 0.0}.get(v.strip(PAD).lower(), np.nan)
                if isinstance(v, str)
                else np.nan
            )
        )
        stripped = objects.map(lambda v: v.strip(PAD) if isinstance(v, str) else v)
        is_bool = objects.map(lambda v: isinstance(v, (bool, np.bool_)))
        numbers = as_number(stripped.where(~is_bool))
        value = booleans.fillna(words).fillna(numbers).astype("float64")
    return value.where(value.isin([0.0, 1.0]))


def parse_timestamps(series: pd.Series) -> pd.Series:
    """Timestamps of ``series`` in UTC (NaT where unparseable): datetimes (naive ones are UTC),
    dates (midnight UTC), and text in the ISO_TIMESTAMP grammar. Numbers are no timestamps: an
    integer epoch is not read as 1970."""
    if isinstance(series.dtype, pd.DatetimeTZDtype):
        return series.dt.tz_convert(UTC)
    if pd.api.types.is_datetime64_dtype(series.dtype):
        return series.dt.tz_localize(UTC)
    if _is_text_dtype(series):
        return _parse_text_timestamps(series.astype("string"))
    objects = series.astype(object)

    def moment(value):
        if isinstance(value, datetime):  # pd.Timestamp included
            if value.tzinfo is not None:
                value = value.astimezone(UTC).replace(tzinfo=None)
            return value
        if isinstance(value, date):
            return datetime(value.year, value.month, value.day)
        return None

    typed = pd.to_datetime(objects.map(moment), errors="coerce", utc=True)
    is_text = objects.map(lambda v: isinstance(v, str))
    parsed = _parse_text_timestamps(objects.where(is_text, None).astype("string"))
    return parsed.where(is_text, typed)


def _parse_text_timestamps(text: pd.Series) -> pd.Series:
    """Text (a pandas string series) in the ISO_TIMESTAMP grammar as UTC timestamps, else NaT."""
    matched = text.where(text.str.fullmatch(ISO_TIMESTAMP).fillna(False).astype(bool))
    return pd.to_datetime(matched, format="ISO8601", utc=True, errors="coerce")


def _timestamp(series):
    return parse_timestamps(series).notna()


def _plausible(series):
    moment = parse_timestamps(series)
    return moment.isna() | (moment >= EARLIEST)  # unparseable: the timestamp check


def _not_in_future(now: datetime):
    def check(series):
        moment = parse_timestamps(series)
        return moment.isna() | (moment <= now + CLOCK_SKEW)  # unparseable: the timestamp check

    return check


def _binary(series):
    return as_binary(series).notna()


def is_nan(series: pd.Series) -> pd.Series:
    """Values that are NaN, as distinct from missing ones: a float or Decimal NaN among a
    driver's values (PostgreSQL ``'NaN'::float8`` and ``numeric``), text spelling NaN. In a
    float64 column NaN is pandas' missing value, so none is NaN there (db.sources.stream keeps a
    source's NaN as the driver's values)."""
    if pd.api.types.is_bool_dtype(series.dtype) or pd.api.types.is_numeric_dtype(series.dtype):
        return pd.Series(False, index=series.index)
    if _is_text_dtype(series):
        text = series.astype("string")
        return text.str.fullmatch(NAN_TEXT).fillna(False).astype(bool)
    if _LAST_NAN[0] is series:  # the score's checks ask of one column in turn
        return _LAST_NAN[1]
    objects = series.astype(object)
    values = objects.to_numpy()
    found = np.zeros(len(objects), dtype=bool)
    kind = pd.api.types.infer_dtype(objects, skipna=True)
    if kind not in _NO_TEXT:  # a driver's numbers hold no text: no per-value look
        is_text = np.fromiter((isinstance(v, str) for v in values), bool, len(values))
        if is_text.any():
            text = objects[is_text].astype("string")
            found[is_text] = text.str.fullmatch(NAN_TEXT).fillna(False).to_numpy(dtype=bool)
    # pandas counts None, pd.NA, float NaN and Decimal NaN missing: the last two are NaN
    for i in np.flatnonzero(objects.isna().to_numpy()):
        found[i] = isinstance(values[i], (float, np.floating, Decimal))
    result = pd.Series(found, index=series.index)
    _LAST_NAN[:] = [series, result]
    return result


# Kinds (pandas.api.types.infer_dtype) of object columns of numbers (and missing values) only.
_NUMBERS_ONLY = {"floating", "integer", "mixed-integer-float", "decimal", "empty"}
# Kinds (pandas.api.types.infer_dtype) of object columns that hold no text.
_NO_TEXT = {"floating", "integer", "mixed-integer-float", "decimal", "empty", "boolean"}
# The last column is_nan judged and its answer (compared by identity: never another column's),
# forgotten after each validation (forget_columns); as_number's the same way.
_LAST_NAN: list = [None, None]
_LAST_NUMBER: list = [None, None]


def forget_columns() -> None:
    """Forget the last column judged (schemas.quarantine calls it around each validation)."""
    _LAST_NAN[:] = [None, None]
    _LAST_NUMBER[:] = [None, None]


def _present(series: pd.Series) -> pd.Series:
    """Values present: not missing, or NaN (which pandas counts as missing)."""
    return series.notna() | is_nan(series)


def _not_null(series):
    return _present(series)


def _not_nan(series):
    return ~is_nan(series)


def _is_number(series):
    """Present values are numbers (finite or not); missing and NaN values are judged apart."""
    return as_number(series, finite=False).notna() | ~_present(series) | is_nan(series)


def _unit_interval(series):
    """Numbers lie in [0, 1]; values that are no number are judged by ``is_number``."""
    number = as_number(series, finite=False)
    return number.isna() | number.between(0.0, 1.0)


def _finite_number(series):
    """Present values are finite numbers; NaN is judged by ``not_nan``."""
    return as_number(series).notna() | is_nan(series)


def predictions_schema(
    attributes: list[str], now: datetime | None = None, decision: bool = False
) -> pa.DataFrameSchema:
    """Schema of extracted predictions: canonical columns plus one column per sensitive attribute.

    Timestamps later than ``now`` (default: the wall clock) plus 5 minutes of clock skew fail, and
    so do timestamps before 1900; a frame without ``predicted_at`` has no timestamps to check. With
    ``decision`` the decision is derived from a score: the column ``decision_score`` must hold a
    finite number and ``y_pred`` is not read.

    These rules, with the result store's limits on group names (schemas.quarantine.store_failures),
    are the only judge of a row: the push-down scan's SQL (db.sources.row_ok) only lets through,
    unchecked, rows these rules are known to accept, and sends every other row here.
    """
    now = now or datetime.now(UTC)
    columns = {
        "prediction_id": pa.Column(
            nullable=False,
            unique=True,
            report_duplicates="exclude_first",
            checks=pa.Check(non_empty_text, element_wise=False, name="non_empty"),
        ),
        "model_id": pa.Column(nullable=False),
        "model_version": pa.Column(nullable=True),
        "predicted_at": pa.Column(  # a source without timestamps has no such column
            nullable=False,
            required=False,
            checks=[
                pa.Check(_timestamp, element_wise=False, name="timestamp"),
                pa.Check(_plausible, element_wise=False, name="plausible_timestamp"),
                pa.Check(_not_in_future(now), element_wise=False, name="not_in_future"),
            ],
        ),
        "y_true": pa.Column(
            nullable=True, checks=pa.Check(_binary, name="binary", error=BINARY_RULE)
        ),
        # A NaN is no missing value: it fails ``not_nan`` (Pandera's own nullable check would
        # count it missing), text that is no number ``is_number``, a number outside [0, 1]
        # ``in_unit_interval``: one rule per value, the one it broke.
        "score": pa.Column(
            nullable=True,
            checks=[
                pa.Check(_not_nan, ignore_na=False, name=NOT_NAN),
                pa.Check(_is_number, name="is_number"),
                pa.Check(_unit_interval, name="in_unit_interval"),
            ],
        ),
    }
    if decision:
        columns["decision_score"] = pa.Column(
            nullable=True,  # a NULL fails the check named as Pandera's own, NaN ``not_nan``
            checks=[
                pa.Check(_not_null, ignore_na=False, name="not_nullable"),
                pa.Check(_not_nan, ignore_na=False, name=NOT_NAN),
                pa.Check(_finite_number, name="finite_number"),
            ],
        )
    else:
        columns["y_pred"] = pa.Column(
            nullable=False, checks=pa.Check(_binary, name="binary", error=BINARY_RULE)
        )
    for attribute in attributes:
        columns[attribute] = pa.Column(
            nullable=False,
            checks=pa.Check(non_empty_text, element_wise=False, name="non_empty"),
        )
    return pa.DataFrameSchema(columns, strict=False, name="predictions")


# The columns of tasks.metrics.group_metrics besides its count frame's keys (the metric_results
# contract, schemas.results.METRIC_RESULTS, adds the keys and the estimator).
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
