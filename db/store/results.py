"""The mapping of an audit's result frames (tasks.core.AuditResult) to the result tables."""

from __future__ import annotations

from typing import Protocol

import pandas as pd

from biasaudit.db.store.models import (
    CalibrationResult,
    ComparisonResult,
    DetectionResult,
    GroupCount,
    MatchResult,
    MetaMetricResult,
    MetricResult,
    PlanningResult,
    ScoreResult,
    ScoringResult,
    ThresholdResult,
    TwoGroupResult,
)
from biasaudit.schemas.results import CONTRACTS, validate_result

# The table each result frame of an audit fills (metrics and smoothed share metric_results).
TABLES: dict[str, type] = {
    "counts": GroupCount,
    "metrics": MetricResult,
    "two_group": TwoGroupResult,
    "match": MatchResult,
    "detection": DetectionResult,
    "planning": PlanningResult,
    "metametrics": MetaMetricResult,
    "comparison": ComparisonResult,
    "scores": ScoreResult,
    "calibration": CalibrationResult,
    "thresholds": ThresholdResult,
    "scoring": ScoringResult,
}


class ResultFrames(Protocol):
    """What db needs of an audit result: its frames (tasks.core.AuditResult has them)."""

    @property
    def counts(self) -> pd.DataFrame: ...

    @property
    def metrics(self) -> pd.DataFrame: ...

    @property
    def smoothed(self) -> pd.DataFrame: ...

    @property
    def two_group(self) -> pd.DataFrame: ...

    @property
    def match(self) -> pd.DataFrame: ...

    @property
    def detection(self) -> pd.DataFrame: ...

    @property
    def planning(self) -> pd.DataFrame: ...

    @property
    def metametrics(self) -> pd.DataFrame: ...

    @property
    def comparison(self) -> pd.DataFrame: ...

    @property
    def scores(self) -> pd.DataFrame: ...

    @property
    def calibration(self) -> pd.DataFrame: ...

    @property
    def thresholds(self) -> pd.DataFrame: ...

    @property
    def scoring(self) -> pd.DataFrame: ...


def result_tables(result: ResultFrames) -> dict[type, pd.DataFrame]:
    """Each result table's model and the rows to insert for it: exactly its contract's columns
    (schemas.results), checked again here so that no column is dropped or left NULL silently."""
    frames = {name: getattr(result, name) for name in CONTRACTS}
    frames["metrics"] = pd.concat(
        [frames.pop("metrics"), frames.pop("smoothed")], ignore_index=True
    )
    return {TABLES[name]: validate_result(name, frame) for name, frame in frames.items()}
