"""The queries behind a report: one stored run, its results and the trend of earlier runs.

Every result table is read whole (``SELECT *`` of the run), so columns that later migrations add
reach the report without a change here. Monitoring state is read when its table exists.
"""

from __future__ import annotations

import pandas as pd
from sqlalchemy import Engine, or_, select

from biasaudit.db.store.history import get_run, read_frame
from biasaudit.db.store.models import (
    AuditRun,
    CalibrationResult,
    ComparisonResult,
    DetectionResult,
    GroupCount,
    MatchResult,
    MetaMetricResult,
    MetricResult,
    MonitorResult,
    PlanningResult,
    ScoreResult,
    ThresholdResult,
    TwoGroupResult,
)
from biasaudit.schemas.report import ReportFrames

RUN_FIELDS = (
    "id",
    "audit_name",
    "model_id",
    "model_version",
    "version",
    "status",
    "as_of",
    "window_start",
    "window_end",
    "rows_read",
    "rows_valid",
    "rows_quarantined",
    "rows_unlabelled",
    "config",
    "summary",
    "error",
    "started_at",
    "finished_at",
    "code_version",
)


def _rows(engine: Engine, table, run_id: int) -> pd.DataFrame:
    with engine.connect() as connection:
        frame = read_frame(select(table).where(table.c.run_id == run_id), connection)
    return frame.drop(columns="run_id")


def trend_runs(engine: Engine, run: AuditRun, limit: int) -> pd.DataFrame:
    """The succeeded runs of the run's audit and model up to it, by as-of (ties by id): the run
    itself and at most ``limit - 1`` earlier ones, oldest first. A later run never appears."""
    query = select(AuditRun.id.label("run_id"), AuditRun.version, AuditRun.as_of).where(
        AuditRun.audit_name == run.audit_name,
        AuditRun.model_id == run.model_id,
        or_(AuditRun.status == "succeeded", AuditRun.id == run.id),
    )
    with engine.connect() as connection:
        runs = read_frame(query, connection)
    # SQLite returns naive datetimes (stored as UTC), PostgreSQL aware ones: compare in UTC.
    runs["as_of"] = _utc(runs["as_of"])
    as_of = _utc(pd.Series([run.as_of])).iloc[0]
    earlier = (runs["as_of"] < as_of) | ((runs["as_of"] == as_of) & (runs["run_id"] <= run.id))
    runs = runs[earlier].sort_values(["as_of", "run_id"])
    return runs.tail(limit).reset_index(drop=True)


def _utc(values: pd.Series) -> pd.Series:
    values = pd.to_datetime(values)
    if values.dt.tz is None:
        return values.dt.tz_localize("UTC")
    return values.dt.tz_convert("UTC")


def trend_metrics(engine: Engine, runs: pd.DataFrame) -> pd.DataFrame:
    """Raw group metric values (with counts) of the given runs, with their version and as-of."""
    if runs.empty:
        return pd.DataFrame()
    query = select(
        MetricResult.run_id,
        MetricResult.attribute,
        MetricResult.group_name,
        MetricResult.metric,
        MetricResult.value,
        MetricResult.numerator,
        MetricResult.denominator,
        MetricResult.undefined_reason,
    ).where(
        MetricResult.run_id.in_([int(i) for i in runs["run_id"]]),
        MetricResult.subset == "group",
        MetricResult.estimator == "raw",
    )
    with engine.connect() as connection:
        values = read_frame(query, connection)
    return values.merge(runs, on="run_id")


def report_frames(engine: Engine, run_id: int, trend_limit: int = 8) -> ReportFrames:
    """Everything the report of one stored run needs (raises LookupError for an unknown run)."""
    run = get_run(engine, run_id)
    if run is None:
        raise LookupError(f"no run with id {run_id}")
    tables = {
        "counts": GroupCount,
        "metrics": MetricResult,
        "detection": DetectionResult,
        "planning": PlanningResult,
        "match": MatchResult,
        "meta": MetaMetricResult,
        "comparison": ComparisonResult,
        "two_group": TwoGroupResult,
        "monitor": MonitorResult,
        "scores": ScoreResult,
        "calibration": CalibrationResult,
        "thresholds": ThresholdResult,
    }
    frames = {key: _rows(engine, model.__table__, run_id) for key, model in tables.items()}
    runs = trend_runs(engine, run, trend_limit)
    return ReportFrames(
        run={name: getattr(run, name, None) for name in RUN_FIELDS},
        trend=trend_metrics(engine, runs),
        **frames,
    )
