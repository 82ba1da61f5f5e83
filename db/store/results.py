"""The mapping of an audit's result frames (tasks.core.AuditResult.frames) to the result tables."""

from __future__ import annotations

from collections.abc import Mapping

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


def result_tables(frames: Mapping[str, pd.DataFrame]) -> dict[type, pd.DataFrame]:
    """Each result table's model and the rows to insert for it, from an audit's result frames by
    contract name (tasks.core.AuditResult.frames): exactly its contract's columns
    (schemas.results), checked again here so that no column is dropped or left NULL silently."""
    tables = {name: frames[name] for name in CONTRACTS}
    tables["metrics"] = pd.concat(
        [tables.pop("metrics"), tables.pop("smoothed")], ignore_index=True
    )
    return {TABLES[name]: validate_result(name, frame) for name, frame in tables.items()}
