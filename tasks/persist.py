"""Persist stage: write the run and every stage's results in one transaction, as a new version."""

from __future__ import annotations

import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

from db.engine import make_engine
from db.runs import RunRecord, record_failed_run, save_run


@task(name="persist", retries=2, retry_delay_seconds=[2, 10], cache_policy=NO_CACHE)
def persist(
    db_url: str,
    record: RunRecord,
    results: dict[type, pd.DataFrame],
    quarantine: pd.DataFrame,
    force: bool = False,
) -> tuple[int, bool]:
    """Prefect task: commit the run (retried with backoff); returns (run id, whether it is new)."""
    engine = make_engine(db_url)
    try:
        return save_run(engine, record, results, quarantine, force=force)
    finally:
        engine.dispose()


@task(name="record-failure", retries=2, retry_delay_seconds=[2, 10], cache_policy=NO_CACHE)
def record_failure(
    db_url: str, record: RunRecord, error: str, quarantine: pd.DataFrame | None
) -> int:
    """Prefect task: record a failed run with its error; no results become visible."""
    engine = make_engine(db_url)
    try:
        return record_failed_run(engine, record, error, quarantine)
    finally:
        engine.dispose()
