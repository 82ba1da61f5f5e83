"""The audit's stages as Prefect tasks: database steps with the retry policy, pure stages as is.

Database steps (begin, scan, previous run, persist, failure, report) retry on transient database
errors with exponential backoff (db.retry); the pure stages of tasks.core run once. The same
functions run without Prefect through ``.fn`` (``run_audit``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import pandas as pd
from biasaudit.db.engine import engine_scope
from biasaudit.db.history import previous_run_metrics
from biasaudit.db.results import result_tables
from biasaudit.db.retry import RETRIES, is_transient, retry_base_seconds
from biasaudit.db.runs import RunRecord, record_failed_run, release_run, save_run, start_run
from biasaudit.db.scan import Scanned, scan_window
from biasaudit.flows.report import write_report
from biasaudit.schemas.config import Audit
from biasaudit.tasks.core import AuditResult
from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff


def _transient(task: Task, task_run: Any, state: Any) -> bool:
    """Prefect retry condition: retry only what db.retry calls transient."""
    return is_transient(state.result(raise_on_failure=False))


def database_task(function: Callable[..., Any]) -> Task:
    """A Prefect task that retries ``function`` on transient database errors."""
    return task(
        retries=RETRIES,
        retry_delay_seconds=exponential_backoff(backoff_factor=retry_base_seconds()),
        retry_condition_fn=_transient,
        cache_policy=NO_CACHE,
    )(function)


@cache
def stage_task(name: str, function: Callable[..., Any]) -> Task:
    """The pure stage ``function`` as a Prefect task named ``name`` (no retries: it is pure)."""
    return task(name=name, cache_policy=NO_CACHE)(function)


@database_task
def begin(db_url: str, record: RunRecord, stale_after: timedelta) -> int:
    """Mark this audit's dead runs failed, wait for a live run of it still going (up to
    ``stale_after``), then commit a ``running`` row and take its lease (db.runs)."""
    with engine_scope(db_url) as engine:
        return start_run(engine, record, wait=stale_after, stale=stale_after)


def release(run_id: int | None) -> None:
    """Give back the run's lease (heartbeat, PostgreSQL lock) whatever happened; plain, no retry."""
    release_run(run_id)


@database_task
def scan(db_url: str, audit: Audit, start: datetime | None, end: datetime, now: datetime) -> Scanned:
    """The audit window as validated cells, quarantine and row accounting (db.scan), read from
    the audit's source database (``source_db``, else the store)."""
    from biasaudit.db.source import source_url

    with engine_scope(source_url(audit, db_url)) as engine:
        return scan_window(engine, audit, start, end, now)


@database_task
def previous_run(
    db_url: str,
    audit_name: str,
    model_id: str,
    as_of: datetime | None = None,
    window_start: datetime | None = None,
) -> tuple[int | None, pd.DataFrame] | tuple[int | None, pd.DataFrame, bool]:
    """The previous run of the audit and its per-group metrics, for the compare stage (with
    ``as_of``: the run of the previous as-of, and whether its window overlaps this run's)."""
    with engine_scope(db_url) as engine:
        return previous_run_metrics(engine, audit_name, model_id, as_of, window_start)


@database_task
def persist(
    db_url: str,
    run_id: int,
    record: RunRecord,
    result: AuditResult,
    quarantine: pd.DataFrame,
    force: bool = False,
    extra: dict[type, pd.DataFrame] | None = None,
) -> tuple[int, bool]:
    """Commit the results (and ``extra`` tables, e.g. monitor_results) as the next version;
    returns (run id, whether it is new)."""
    tables = {**result_tables(result), **(extra or {})}
    with engine_scope(db_url) as engine:
        saved = save_run(engine, run_id, record, tables, quarantine, force=force)
    release_run(run_id)
    return saved


@database_task
def record_failure(
    db_url: str, run_id: int | None, record: RunRecord, error: str, quarantine: pd.DataFrame | None
) -> int:
    """Mark the run failed with its error; no results become visible."""
    with engine_scope(db_url) as engine:
        failed = record_failed_run(engine, run_id, record, error, quarantine)
    release_run(run_id)
    return failed


@database_task
def report(db_url: str, run_id: int, audit_name: str, summary: dict) -> str:
    """Write the run's HTML report and publish its first screen and comparisons as Prefect
    artifacts (flows.report)."""
    return write_report(db_url, run_id, audit_name, summary)
