"""The mapping of an audit's result frames (tasks.core.AuditResult) to the result tables."""

from __future__ import annotations

from typing import Any, Protocol

import pandas as pd

from biasaudit.db.models import (
    ComparisonResult,
    DetectionResult,
    GroupCount,
    MatchResult,
    MetaMetricResult,
    MetricResult,
    PlanningResult,
    TwoGroupResult,
)


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


def _columns(model: Any, frame: pd.DataFrame) -> pd.DataFrame:
    """The frame's columns that the table has (its key and value columns, without run_id)."""
    names = [c.name for c in model.__table__.columns if c.name != "run_id"]
    return frame[[c for c in names if c in frame.columns]]


def result_tables(result: ResultFrames) -> dict[type, pd.DataFrame]:
    """Each result table's model and the rows to insert for it."""
    frames: dict[type, pd.DataFrame] = {
        GroupCount: result.counts,
        MetricResult: pd.concat([result.metrics, result.smoothed], ignore_index=True),
        TwoGroupResult: result.two_group,
        MatchResult: result.match,
        DetectionResult: result.detection,
        PlanningResult: result.planning,
        MetaMetricResult: result.metametrics,
        ComparisonResult: result.comparison,
    }
    return {model: _columns(model, frame) for model, frame in frames.items()}
