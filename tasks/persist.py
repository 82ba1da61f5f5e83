"""Persist stage: open the run, then write it and every stage's results in one transaction.

The database tasks retry with exponential backoff (base ``BIASAUDIT_RETRY_BASE_SECONDS``, default
2 s: waits of 2, 4 and 8 s) before the run fails with the cause.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff
from sqlalchemy.exc import InterfaceError, OperationalError

from biasaudit.db.engine import make_engine
from biasaudit.db.runs import RunRecord, abandon_stale_runs, record_failed_run, save_run, start_run

RETRIES = 3
BACKOFF = exponential_backoff(
    backoff_factor=float(os.environ.get("BIASAUDIT_RETRY_BASE_SECONDS", "2"))
)


def database_unreachable(task, task_run, state) -> bool:
    """Retry only when the database could not be reached or answered with an operational error,
    never on bad data or configuration (those fail at once)."""
    return isinstance(state.result(raise_on_failure=False), (OperationalError, InterfaceError))


database_task = task(
    retries=RETRIES,
    retry_delay_seconds=BACKOFF,
    retry_condition_fn=database_unreachable,
    cache_policy=NO_CACHE,
)


@database_task
def begin_run(db_url: str, record: RunRecord, stale_after: timedelta) -> int:
    """Prefect task: mark this audit's abandoned runs failed, wait for any run of it still going
    (up to ``stale_after``), then commit a ``running`` row."""
    engine = make_engine(db_url)
    try:
        abandon_stale_runs(engine, record.audit_name, stale_after)
        return start_run(engine, record, wait=stale_after)
    finally:
        engine.dispose()


@database_task
def persist(
    db_url: str,
    run_id: int,
    record: RunRecord,
    results: dict[type, pd.DataFrame],
    quarantine: pd.DataFrame,
    force: bool = False,
) -> tuple[int, bool]:
    """Prefect task: commit the results as the next version; returns (run id, whether it is new)."""
    engine = make_engine(db_url)
    try:
        return save_run(engine, run_id, record, results, quarantine, force=force)
    finally:
        engine.dispose()


@database_task
def record_failure(
    db_url: str, run_id: int | None, record: RunRecord, error: str, quarantine: pd.DataFrame | None
) -> int:
    """Prefect task: mark the run failed with its error; no results become visible."""
    engine = make_engine(db_url)
    try:
        return record_failed_run(engine, run_id, record, error, quarantine)
    finally:
        engine.dispose()
