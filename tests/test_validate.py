"""Validation quarantines every failing row with its reason and loses nothing."""

import numpy as np
import pandas as pd
import pytest

from biasaudit.schemas.quarantine import TooManyInvalidRows, check_invalid_fraction, split_valid


def frame(**overrides):
    base = {
        "prediction_id": ["a", "b", "c", "d"],
        "model_id": "m",
        "model_version": "1",
        "predicted_at": pd.to_datetime(["2026-01-01"] * 4, utc=True),
        "y_true": [1.0, 0.0, np.nan, 1.0],
        "y_pred": [1, 0, 1, 0],
        "score": [0.9, 0.1, 0.7, np.nan],
        "race": ["A", "B", "A", "B"],
    }
    base.update(overrides)
    return pd.DataFrame(base)


def test_clean_frame_passes_whole():
    """It accepts a clean frame, unknown outcomes and missing scores included."""
    valid, quarantine = split_valid(frame(), ["race"])
    assert len(valid) == 4 and quarantine.empty
    assert valid["y_pred"].dtype == np.int8
    assert valid["y_true"].isna().sum() == 1


@pytest.mark.parametrize(
    ("overrides", "row", "column", "rule"),
    [
        ({"y_pred": [1, 2, 1, 0]}, "b", "y_pred", "binary"),
        ({"y_true": [1.0, 0.0, 3.0, 1.0]}, "c", "y_true", "binary"),
        ({"score": [0.9, 1.5, 0.7, 0.1]}, "b", "score", "in_unit_interval"),
        ({"race": ["A", None, "A", "B"]}, "b", "race", "not_nullable"),
        ({"race": ["A", "  ", "A", "B"]}, "b", "race", "non_empty"),
        ({"prediction_id": ["a", "b", "a", "d"]}, "a", "prediction_id", "field_uniqueness"),
        ({"y_pred": [1, "yes", 1, 0]}, "b", "y_pred", "binary"),
        (
            {"predicted_at": ["2026-01-01", "soon", "2026-01-02", "2026-01-03"]},
            "b",
            "predicted_at",
            "timestamp",
        ),
    ],
)
def test_bad_value_is_quarantined_with_reason(overrides, row, column, rule):
    """It quarantines the row with the bad value, naming row, column, value and rule."""
    data = frame(**overrides)
    valid, quarantine = split_valid(data, ["race"])
    assert len(valid) + quarantine["row_ref"].size == len(data)
    record = quarantine.iloc[0]
    assert (record["row_ref"], record["column_name"]) == (row, column)
    assert rule in record["rule"]
    assert record["row"]["prediction_id"] == row


def test_duplicate_keeps_first_and_row_is_kept_whole():
    """It keeps the first of duplicated ids and stores the whole duplicate row."""
    valid, quarantine = split_valid(frame(prediction_id=["a", "b", "a", "d"]), ["race"])
    assert list(valid["prediction_id"]) == ["a", "b", "d"]
    assert quarantine.iloc[0]["row"]["race"] == "A"
    assert quarantine.iloc[0]["row"]["y_pred"] == 1


def test_row_with_several_failures_leaves_once():
    """It records each failure but removes the row once: accepted + quarantined = read."""
    data = frame(y_pred=[1, 5, 1, 0], score=[0.9, -1.0, 0.7, 0.1])
    valid, quarantine = split_valid(data, ["race"])
    assert len(quarantine) == 2 and set(quarantine["row_ref"]) == {"b"}
    assert len(valid) == 3


def test_invalid_fraction_threshold():
    """It fails clearly above the configured invalid fraction, and not at it."""
    check_invalid_fraction(100, 5, 0.05)
    with pytest.raises(TooManyInvalidRows, match="6 of 100 rows"):
        check_invalid_fraction(100, 6, 0.05)
