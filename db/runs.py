"""Writing audit runs: one transaction per run, a new version per (audit, model), no duplicates.

A succeeded run and all its result rows commit together, so a reader never sees half a run. Re-running
identical input (same fingerprint) with an identical configuration returns the existing run unless
forced. On PostgreSQL a transaction-scoped advisory lock serialises version numbering per audit and
model; everywhere, the unique constraint on (audit_name, model_id, version) is the last word.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pandas as pd
from sqlalchemy import Engine, func, insert, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.models import AuditRun, QuarantinedRow

SUCCEEDED, FAILED = "succeeded", "failed"


@dataclass
class RunRecord:
    """Everything about a run except its result tables."""

    audit_name: str
    model_id: str
    model_version: str | None
    as_of: datetime
    window_start: datetime | None
    window_end: datetime
    config: dict[str, Any]
    config_hash: str
    code_version: str
    started_at: datetime
    input_fingerprint: str | None = None
    flow_run_id: str | None = None
    rows_read: int = 0
    rows_valid: int = 0
    rows_quarantined: int = 0
    rows_unlabelled: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def _records(frame: pd.DataFrame, run_id: int) -> list[dict]:
    """Rows as dicts for executemany, with NaN turned into NULL."""
    clean = frame.astype(object).where(frame.notna(), None)
    return [{"run_id": run_id, **row} for row in clean.to_dict(orient="records")]


def _lock_versioning(session: Session, audit_name: str, model_id: str) -> None:
    if session.bind.dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(f"{audit_name}\0{model_id}".encode()).digest()[:8])
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key - (1 << 63)})


def find_identical_run(session: Session, record: RunRecord) -> AuditRun | None:
    """The latest succeeded run of the same audit and model with equal configuration and input."""
    return session.scalars(
        select(AuditRun)
        .where(
            AuditRun.audit_name == record.audit_name,
            AuditRun.model_id == record.model_id,
            AuditRun.status == SUCCEEDED,
            AuditRun.config_hash == record.config_hash,
            AuditRun.input_fingerprint == record.input_fingerprint,
        )
        .order_by(AuditRun.version.desc())
        .limit(1)
    ).first()


def save_run(
    engine: Engine,
    record: RunRecord,
    results: dict[type, pd.DataFrame],
    quarantine: pd.DataFrame,
    *,
    force: bool = False,
    attempts: int = 3,
) -> tuple[int, bool]:
    """Commit a succeeded run with its result frames; returns (run id, whether it is new).

    ``results`` maps each result model (e.g. GroupCount) to its frame, whose columns are the
    model's columns without ``run_id``.
    """
    for attempt in range(attempts):
        try:
            with Session(engine) as session, session.begin():
                _lock_versioning(session, record.audit_name, record.model_id)
                if not force and (existing := find_identical_run(session, record)):
                    return existing.id, False
                version = session.scalar(
                    select(func.coalesce(func.max(AuditRun.version), 0)).where(
                        AuditRun.audit_name == record.audit_name,
                        AuditRun.model_id == record.model_id,
                    )
                )
                run = _run_row(record, status=SUCCEEDED, version=version + 1)
                session.add(run)
                session.flush()
                for model, frame in results.items():
                    if not frame.empty:
                        session.execute(insert(model), _records(frame, run.id))
                _add_quarantine(session, run.id, record, quarantine)
                return run.id, True
        except IntegrityError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def record_failed_run(
    engine: Engine, record: RunRecord, error: str, quarantine: pd.DataFrame | None = None
) -> int:
    """Record a failed run (no version, no results) with its error and any quarantined rows."""
    with Session(engine) as session, session.begin():
        run = _run_row(record, status=FAILED, version=None, error=error)
        session.add(run)
        session.flush()
        if quarantine is not None:
            _add_quarantine(session, run.id, record, quarantine)
        return run.id


def _run_row(record: RunRecord, *, status: str, version: int | None, error: str | None = None):
    fields = {k: getattr(record, k) for k in RunRecord.__dataclass_fields__}
    return AuditRun(
        **fields,
        status=status,
        version=version,
        error=error,
        finished_at=datetime.now(UTC),
    )


def _add_quarantine(session: Session, run_id: int, record: RunRecord, quarantine: pd.DataFrame):
    if quarantine.empty:
        return
    rows = _records(quarantine, run_id)
    now = datetime.now(UTC)
    for row in rows:
        row.update(source=f"audit:{record.audit_name}", created_at=now)
    session.execute(insert(QuarantinedRow), rows)
