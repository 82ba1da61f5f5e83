"""History queries: stored runs and their results, read only from the versioned result tables."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pandas as pd
from sqlalchemy import Connection, Engine, Executable, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from biasaudit.db.store.models import (
    AuditRun,
    GroupCount,
    MatchResult,
    MetricResult,
    PlanningResult,
)
from biasaudit.schemas.metric_ids import BASE_RATES


def read_frame(query: Executable, connection: Connection) -> pd.DataFrame:
    """``pandas.read_sql`` failing with the database's own error: pandas wraps it in a DatabaseError
    whose message is the whole statement with its parameters, and which the retry policy
    (db.retry) would not know as transient."""
    try:
        return pd.read_sql(query, connection)
    except pd.errors.DatabaseError as exc:
        if isinstance(exc.__cause__, SQLAlchemyError):
            raise exc.__cause__ from None
        raise


# Columns shown of each stage's results, by the CLI and the HTML report alike.
FLAGGED_COLUMNS = [
    "attribute",
    "group_name",
    "reference",
    "metric",
    "difference",
    "hdi_low",
    "hdi_high",
    "hdi_mass",
    "prob_deviation",
    "decision",
    "p_adjusted",
]
PLANNING_COLUMNS = [
    "attribute",
    "group_name",
    "reference",
    "metric",
    "difference",
    "size_group",
    "size_reference",
    "needed",
    "needed_neyman",
    "achieved_power",
    "verdict",
    "bias_n",
    "reason",
]
# A scored run's AUC and calibration per group against its reference (tasks.scores), and the
# headers `history RUN --all` shows them under.
SCORE_COLUMNS = {
    "attribute": "attribute",
    "group_name": "group",
    "reference": "against",
    "positives_group": "positives",
    "negatives_group": "negatives",
    "auc_group": "auc",
    "auc_low_group": "low",
    "auc_high_group": "high",
    "auc_p_adjusted": "auc p_adj",
    "slope_group": "slope",
    "calibration_p_adjusted": "calibration p_adj",
}
META_COLUMNS = [
    "attribute",
    "metric",
    "k",
    "denominator_min",
    "denominator_max",
    "var",
    "corrected_var",
    "interval_low",
    "interval_high",
    "mm_diff",
    "mm_ratio",
    "reason",
]

RUN_COLUMNS = [
    AuditRun.id,
    AuditRun.audit_name,
    AuditRun.model_id,
    AuditRun.version,
    AuditRun.status,
    AuditRun.as_of,
    AuditRun.rows_read,
    AuditRun.rows_valid,
    AuditRun.rows_quarantined,
    AuditRun.finished_at,
    AuditRun.error,
]


def _where_equal(query, filters: dict):
    """Add ``column == value`` for every filter whose value is given."""
    for column, value in filters.items():
        if value is not None:
            query = query.where(column == value)
    return query


def list_runs(
    engine: Engine,
    audit: str | None = None,
    model: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pd.DataFrame:
    """Runs matching the filters, newest first (``as_of`` in [since, until])."""
    query = select(*RUN_COLUMNS).order_by(AuditRun.as_of.desc(), AuditRun.id.desc())
    query = _where_equal(
        query, {AuditRun.audit_name: audit, AuditRun.model_id: model, AuditRun.status: status}
    )
    if since:
        query = query.where(AuditRun.as_of >= since)
    if until:
        query = query.where(AuditRun.as_of <= until)
    with engine.connect() as connection:
        runs = read_frame(query, connection)
    return runs.astype({"version": "Int64"})


def get_run(engine: Engine, run_id: int) -> AuditRun | None:
    with Session(engine, expire_on_commit=False) as session:
        return session.get(AuditRun, run_id)


def run_metrics(
    engine: Engine,
    run_id: int,
    attribute: str | None = None,
    metric: str | None = None,
    estimator: str = "raw",
    subset: str = "group",
) -> pd.DataFrame:
    """One run's metric values of groups (or of their complements, ``subset='rest'``) with their
    ``labelled`` predictions (TP + FP + FN + TN)."""
    labelled = (GroupCount.tp + GroupCount.fp + GroupCount.fn + GroupCount.tn).label("labelled")
    query = (
        select(
            MetricResult.attribute,
            MetricResult.group_name,
            labelled,
            MetricResult.metric,
            MetricResult.value,
            MetricResult.numerator,
            MetricResult.denominator,
            MetricResult.undefined_reason,
        )
        .join(
            GroupCount,
            (GroupCount.run_id == MetricResult.run_id)
            & (GroupCount.attribute == MetricResult.attribute)
            & (GroupCount.group_name == MetricResult.group_name)
            & (GroupCount.subset == MetricResult.subset),
        )
        .where(
            MetricResult.run_id == run_id,
            MetricResult.subset == subset,
            MetricResult.estimator == estimator,
        )
        .order_by(MetricResult.attribute, MetricResult.group_name, MetricResult.metric)
    )
    if attribute:
        query = query.where(MetricResult.attribute == attribute)
    if metric:
        query = query.where(MetricResult.metric == metric)
    with engine.connect() as connection:
        return read_frame(query, connection)


def run_match(engine: Engine, run_id: int, below: float = 1.0) -> pd.DataFrame:
    """One run's MATCH results with p-value below ``below``, smallest first."""
    query = (
        select(
            MatchResult.attribute,
            MatchResult.group_name,
            MatchResult.reference,
            MatchResult.metric,
            MatchResult.predictions_group,
            MatchResult.percentile,
            MatchResult.p_value,
        )
        .where(MatchResult.run_id == run_id, MatchResult.p_value < below)
        .order_by(MatchResult.p_value)
    )
    with engine.connect() as connection:
        return read_frame(query, connection)


def rates_by_run(
    engine: Engine, run_ids: list[int], attribute: str, group: str, reference: str, metric: str
) -> pd.DataFrame:
    """Per run: one comparison's rates, ``value_group`` and ``value_reference``, from the
    planning results."""
    query = (
        select(
            AuditRun.id.label("run_id"),
            AuditRun.audit_name,
            AuditRun.model_id,
            AuditRun.version,
            PlanningResult.value_group,
            PlanningResult.value_reference,
        )
        .join(PlanningResult, PlanningResult.run_id == AuditRun.id)
        .where(
            AuditRun.id.in_(run_ids),
            PlanningResult.attribute == attribute,
            PlanningResult.group_name == group,
            PlanningResult.reference == reference,
            PlanningResult.metric == metric,
        )
        .order_by(AuditRun.id)
    )
    with engine.connect() as connection:
        return read_frame(query, connection)


def run_results(
    engine: Engine,
    table: Any,
    run_id: int,
    attribute: str | None = None,
    metric: str | None = None,
) -> pd.DataFrame:
    """Rows of one result table (PlanningResult, DetectionResult, ...) for one run, filtered."""
    query = select(table).where(table.run_id == run_id)
    if attribute:
        query = query.where(table.attribute == attribute)
    if metric:
        query = query.where(table.metric == metric)
    with engine.connect() as connection:
        return read_frame(query, connection).drop(columns="run_id")


def flagged_detections(detection: pd.DataFrame) -> pd.DataFrame:
    """The flagged rows of a run's detection results, with the decisions that may be printed
    (schemas.results.stated_decisions). A base rate is never a finding: runs stored before base
    rates became context hold tests of them, which are left out."""
    # imported here: the listing commands import this module and no Pandera (schemas.results)
    from biasaudit.schemas.results import stated_decisions

    flagged = detection[detection["flagged"].astype(bool) & ~detection["metric"].isin(BASE_RATES)]
    return flagged.assign(decision=stated_decisions(flagged))


def latest_run_id(
    engine: Engine, audit_name: str, model_id: str, before_version: int | None = None
) -> int | None:
    """The latest succeeded run of an audit and model (below ``before_version`` if given)."""
    query = select(AuditRun.id).where(
        AuditRun.audit_name == audit_name,
        AuditRun.model_id == model_id,
        AuditRun.status == "succeeded",
    )
    if before_version is not None:
        query = query.where(AuditRun.version < before_version)
    with engine.connect() as connection:
        return connection.scalar(query.order_by(AuditRun.version.desc()).limit(1))


def previous_as_of_run(
    engine: Engine, audit_name: str, model_id: str, as_of: datetime
) -> AuditRun | None:
    """The succeeded run of an audit and model with the latest as-of strictly before ``as_of``
    (the highest version among runs of that as-of): "previous" is the previous as-of, so a
    backfilled run is never compared with a later one."""
    query = (
        select(AuditRun)
        .where(
            AuditRun.audit_name == audit_name,
            AuditRun.model_id == model_id,
            AuditRun.status == "succeeded",
            AuditRun.as_of < as_of,
        )
        .order_by(AuditRun.as_of.desc(), AuditRun.version.desc())
        .limit(1)
    )
    with Session(engine, expire_on_commit=False) as session:
        return session.scalar(query)


def metric_series(
    engine: Engine,
    metric: str,
    attribute: str | None = None,
    group: str | None = None,
    audit: str | None = None,
    model: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pd.DataFrame:
    """Raw per-group values of one metric across succeeded runs (the ``metric_series`` view's
    rows), oldest first."""
    query = (
        select(
            AuditRun.id.label("run_id"),
            AuditRun.audit_name,
            AuditRun.model_id,
            AuditRun.version,
            AuditRun.as_of,
            MetricResult.attribute,
            MetricResult.group_name,
            MetricResult.value,
            MetricResult.denominator,
        )
        .join(MetricResult, MetricResult.run_id == AuditRun.id)
        .where(
            AuditRun.status == "succeeded",
            MetricResult.subset == "group",
            MetricResult.estimator == "raw",
            MetricResult.metric == metric,
        )
        .order_by(AuditRun.as_of, AuditRun.id)
    )
    query = _where_equal(
        query,
        {
            MetricResult.attribute: attribute,
            MetricResult.group_name: group,
            AuditRun.audit_name: audit,
            AuditRun.model_id: model,
        },
    )
    if since:
        query = query.where(AuditRun.as_of >= since)
    if until:
        query = query.where(AuditRun.as_of <= until)
    with engine.connect() as connection:
        return read_frame(query, connection)


def previous_run_metrics(
    engine: Engine,
    audit_name: str,
    model_id: str,
    as_of: datetime | None = None,
    window_start: datetime | None = None,
) -> tuple[int | None, pd.DataFrame] | tuple[int | None, pd.DataFrame, bool]:
    """The previous run of the audit and its per-group raw metrics ((None, empty) if none).

    Without ``as_of``: the latest succeeded run. With it: the run of the previous
    as-of (previous_as_of_run), and a third item, whether its window overlaps this run's
    (window_start, as_of] (then the compare stage must not test the two as independent)."""
    if as_of is None:
        run_id = latest_run_id(engine, audit_name, model_id)
        if run_id is None:
            return None, pd.DataFrame()
        return run_id, run_metrics(engine, run_id)
    run = previous_as_of_run(engine, audit_name, model_id, as_of)
    if run is None:
        return None, pd.DataFrame(), False
    overlap = _overlaps((run.window_start, run.window_end), (window_start, as_of))
    return run.id, run_metrics(engine, run.id), overlap


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _overlaps(before: tuple, after: tuple) -> bool:
    """Whether two (start, end] windows share time (start None: the beginning of time); the
    rule of tasks.compare.windows_overlap (db does not import tasks)."""
    (start_1, end_1), (start_2, end_2) = before, after
    return (start_1 is None or _utc(start_1) < _utc(end_2)) and (
        start_2 is None or _utc(start_2) < _utc(end_1)
    )
