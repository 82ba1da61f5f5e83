"""Stored monitoring state (table monitor_results, migration 0011): the previous as-of's state
that a monitored run continues from, and trajectories for ``history``."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
from sqlalchemy import Engine, select

from biasaudit.db.store.history import read_frame
from biasaudit.db.store.models import AuditRun, MonitorResult
from biasaudit.schemas.results import COMPARISON_KEY, MONITOR_STATE

TRAJECTORY_COLUMNS = [
    "e_value",
    "e_process",
    "cs_low",
    "cs_high",
    "crossed",
    "alarm",
    "difference",
    "denominator_group",
    "denominator_reference",
]


def previous_monitor_state(
    engine: Engine, audit_name: str, model_id: str, as_of: datetime
) -> tuple[int | None, datetime | None, pd.DataFrame]:
    """(run id, as-of, state) of the monitored run with the previous as-of: the latest succeeded
    run of the audit and model before ``as_of`` that stored monitor results (highest version
    among runs of that as-of); (None, None, empty state) when there is none."""
    monitored = select(MonitorResult.run_id).where(MonitorResult.run_id == AuditRun.id).exists()
    query = (
        select(AuditRun.id, AuditRun.as_of)
        .where(
            AuditRun.audit_name == audit_name,
            AuditRun.model_id == model_id,
            AuditRun.status == "succeeded",
            AuditRun.as_of < as_of,
            monitored,
        )
        .order_by(AuditRun.as_of.desc(), AuditRun.version.desc())
        .limit(1)
    )
    columns = [getattr(MonitorResult, c) for c in COMPARISON_KEY + MONITOR_STATE]
    with engine.connect() as connection:
        previous = connection.execute(query).first()
        if previous is None:
            return None, None, pd.DataFrame(columns=COMPARISON_KEY + MONITOR_STATE)
        state = read_frame(select(*columns).where(MonitorResult.run_id == previous.id), connection)
    as_of_previous = pd.Timestamp(previous.as_of)
    if as_of_previous.tzinfo is None:  # SQLite returns naive UTC
        as_of_previous = as_of_previous.tz_localize("UTC")
    return previous.id, as_of_previous.to_pydatetime(), state


def monitor_trajectory(
    engine: Engine,
    audit: str | None = None,
    model: str | None = None,
    attribute: str | None = None,
    group: str | None = None,
    reference: str | None = None,
    metric: str | None = None,
) -> pd.DataFrame:
    """Per succeeded monitored run (oldest first; of an as-of run more than once, the latest
    version) and comparison: e-value, e-process, confidence sequence and alarms."""
    query = (
        select(
            AuditRun.id.label("run_id"),
            AuditRun.audit_name,
            AuditRun.model_id,
            AuditRun.version,
            AuditRun.as_of,
            *[getattr(MonitorResult, c) for c in COMPARISON_KEY + TRAJECTORY_COLUMNS],
        )
        .join(MonitorResult, MonitorResult.run_id == AuditRun.id)
        .where(AuditRun.status == "succeeded")
        .order_by(AuditRun.as_of, AuditRun.id)
    )
    filters = {
        AuditRun.audit_name: audit,
        AuditRun.model_id: model,
        MonitorResult.attribute: attribute,
        MonitorResult.group_name: group,
        MonitorResult.reference: reference,
        MonitorResult.metric: metric,
    }
    for column, value in filters.items():
        if value is not None:
            query = query.where(column == value)
    with engine.connect() as connection:
        rows = read_frame(query, connection)
    # A backfill re-runs later as-ofs as new versions: the trajectory is the latest chain.
    latest = rows.groupby(["audit_name", "model_id", "as_of"])["version"].transform("max")
    return rows[rows["version"] == latest].reset_index(drop=True)


def monitored_as_ofs(engine: Engine, audit_name: str, model_id: str) -> list[datetime]:
    """As-ofs (UTC) of the succeeded runs of an audit and model that stored monitor results."""
    monitored = select(MonitorResult.run_id).where(MonitorResult.run_id == AuditRun.id).exists()
    query = (
        select(AuditRun.as_of)
        .where(
            AuditRun.audit_name == audit_name,
            AuditRun.model_id == model_id,
            AuditRun.status == "succeeded",
            monitored,
        )
        .distinct()
    )
    with engine.connect() as connection:
        moments = connection.execute(query).scalars().all()
    return sorted(m.replace(tzinfo=UTC) if m.tzinfo is None else m.astimezone(UTC) for m in moments)
