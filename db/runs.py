"""Writing audit runs: visible progress, one transaction for the results, gap-free versions.

A run's life: ``start_run`` commits a row with status ``running`` (so an operator sees it); the
results and the promotion to ``succeeded`` with the next version number commit together in
``save_run``, so a reader never sees half a run; ``record_failed_run`` marks it ``failed`` with the
error. A process killed mid-run leaves only its ``running`` row, which ``abandon_stale_runs`` (called
when the next run of the same audit starts) marks ``failed``. Re-running identical input (same
fingerprint) with an identical configuration returns the existing run unless forced. On PostgreSQL a
transaction-scoped advisory lock serialises version numbering per audit and model; everywhere, the
unique constraint on (audit_name, model_id, version) is the last word.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
from biasaudit.db.models import AuditRun, QuarantinedRow
from sqlalchemy import Engine, delete, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

RUNNING, SUCCEEDED, FAILED = "running", "succeeded", "failed"
log = logging.getLogger(__name__)
ABANDONED = "abandoned: the process ended before the run finished"


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

    def columns(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _records(frame: pd.DataFrame, run_id: int) -> list[dict]:
    """Rows as dicts for executemany, with NaN turned into NULL."""
    clean = frame.astype(object).where(frame.notna(), None)
    return [{"run_id": run_id, **row} for row in clean.to_dict(orient="records")]


def _lock_versioning(session: Session, audit_name: str, model_id: str) -> None:
    if session.bind.dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(f"{audit_name}\0{model_id}".encode()).digest()[:8])
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key - (1 << 63)})


class RunInProgress(RuntimeError):
    """Another run of the same audit and model is still running after the wait."""


def start_run(
    engine: Engine, record: RunRecord, wait: timedelta = timedelta(0), poll: float = 1.0
) -> int:
    """Commit a ``running`` row for the run and return its id, once no other run of the same
    audit and model is running (waiting up to ``wait``): runs of one audit never overlap.

    On PostgreSQL the check and the insert are serialised by the advisory lock; on SQLite two
    processes starting within the same instant may both pass the check (SQLite is the
    single-user default; versions stay distinct either way).
    """
    deadline = time.monotonic() + wait.total_seconds()
    announced = False
    while True:
        with Session(engine) as session, session.begin():
            _lock_versioning(session, record.audit_name, record.model_id)
            busy = session.scalar(
                select(AuditRun.id).where(
                    AuditRun.audit_name == record.audit_name,
                    AuditRun.model_id == record.model_id,
                    AuditRun.status == RUNNING,
                )
            )
            if busy is None:
                record.started_at = datetime.now(UTC)
                run = AuditRun(**record.columns(), status=RUNNING, finished_at=record.started_at)
                session.add(run)
                session.flush()
                return run.id
        if not announced:
            log.warning(
                "run %s of audit %r is still running: waiting up to %s for it to finish "
                "(`biasaudit abandon %s` releases it if its process is gone)",
                busy,
                record.audit_name,
                wait,
                busy,
            )
            announced = True
        if time.monotonic() >= deadline:
            raise RunInProgress(
                f"run {busy} of audit {record.audit_name!r} (model {record.model_id!r}) is still "
                f"running after waiting {wait}"
            )
        time.sleep(poll)


def abandon_run(engine: Engine, run_id: int) -> bool:
    """Mark one ``running`` run failed as abandoned (an operator knows its process is gone)."""
    with Session(engine) as session, session.begin():
        result = session.execute(
            update(AuditRun)
            .where(AuditRun.id == run_id, AuditRun.status == RUNNING)
            .values(
                status=FAILED,
                error=ABANDONED + " (marked by an operator)",
                finished_at=datetime.now(UTC),
            )
        )
        return result.rowcount == 1


def abandon_stale_runs(engine: Engine, audit_name: str, older_than: timedelta) -> int:
    """Mark ``running`` runs of this audit started more than ``older_than`` ago as failed."""
    cutoff = datetime.now(UTC) - older_than
    with Session(engine) as session, session.begin():
        result = session.execute(
            update(AuditRun)
            .where(
                AuditRun.audit_name == audit_name,
                AuditRun.status == RUNNING,
                AuditRun.started_at < cutoff,
            )
            .values(status=FAILED, error=ABANDONED, finished_at=datetime.now(UTC))
        )
        return result.rowcount


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
    run_id: int,
    record: RunRecord,
    results: dict[type, pd.DataFrame],
    quarantine: pd.DataFrame,
    *,
    force: bool = False,
    attempts: int = 3,
) -> tuple[int, bool]:
    """Commit the results and promote run ``run_id`` to succeeded; returns (run id, is new).

    ``results`` maps each result model (e.g. GroupCount) to its frame, whose columns are the
    model's columns without ``run_id``. When an identical run exists (and not ``force``), the
    running row is removed in the same transaction and the existing run's id is returned.
    """
    for attempt in range(attempts):
        try:
            with Session(engine) as session, session.begin():
                _lock_versioning(session, record.audit_name, record.model_id)
                if not force and (existing := find_identical_run(session, record)):
                    session.execute(delete(AuditRun).where(AuditRun.id == run_id))
                    return existing.id, False
                version = session.scalar(
                    select(func.coalesce(func.max(AuditRun.version), 0)).where(
                        AuditRun.audit_name == record.audit_name,
                        AuditRun.model_id == record.model_id,
                    )
                )
                session.execute(
                    update(AuditRun)
                    .where(AuditRun.id == run_id)
                    .values(
                        **record.columns(),
                        status=SUCCEEDED,
                        version=version + 1,
                        finished_at=datetime.now(UTC),
                    )
                )
                for model, frame in results.items():
                    if not frame.empty:
                        session.execute(insert(model), _records(frame, run_id))
                _add_quarantine(session, run_id, record, quarantine)
                return run_id, True
        except IntegrityError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def record_failed_run(
    engine: Engine,
    run_id: int | None,
    record: RunRecord,
    error: str,
    quarantine: pd.DataFrame | None = None,
) -> int:
    """Mark the run failed (no version, no results) with its error and any quarantined rows."""
    values = {**record.columns(), "status": FAILED, "error": error[:4000]}
    with Session(engine) as session, session.begin():
        if run_id is None:
            run = AuditRun(**values, finished_at=datetime.now(UTC))
            session.add(run)
            session.flush()
            run_id = run.id
        else:
            session.execute(
                update(AuditRun)
                .where(AuditRun.id == run_id)
                .values(**values, finished_at=datetime.now(UTC))
            )
        if quarantine is not None:
            _add_quarantine(session, run_id, record, quarantine)
        return run_id


def _add_quarantine(session: Session, run_id: int, record: RunRecord, quarantine: pd.DataFrame):
    if quarantine.empty:
        return
    rows = _records(quarantine, run_id)
    now = datetime.now(UTC)
    for row in rows:
        row.update(source=f"audit:{record.audit_name}", created_at=now)
    session.execute(insert(QuarantinedRow), rows)
