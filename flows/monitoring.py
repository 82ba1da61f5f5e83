"""Monitored runs and backtests: the database side of tasks.monitor.

``monitor_run`` is what a monitored audit run adds: it continues the state of the run with the
previous as-of, counts the predictions that became usable since (decisions in (previous, as_of],
outcomes matured in it: tasks.increments.increment_windows) and returns the rows of
monitor_results. Each window is read by the audit's own scan (db.scan: its source database,
scan mode, decision from a score, validation and quarantine), whose accepted cells are counted
(tasks.monitor.increment_counts). ``backtest`` replays the same increments night by night from the
database without writing runs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cache

import pandas as pd

from biasaudit.db.engine import engine_scope, make_engine
from biasaudit.db.models import MonitorResult, store_limits
from biasaudit.db.monitor import monitored_as_ofs, previous_monitor_state
from biasaudit.db.scan import valid_cells
from biasaudit.db.source import source_url
from biasaudit.schemas.config import Audit, Monitor
from biasaudit.schemas.names import StoreLimits
from biasaudit.tasks.increments import as_of_schedule, increment_windows
from biasaudit.tasks.monitor import Settings, increment_counts, monitor_update
from biasaudit.tasks.monitor_frame import replay_counts

# The accepted cells of a (start, end] window of the audit's source.
Cells = Callable[[datetime | None, datetime], pd.DataFrame]


def settings_of(audit: Audit) -> Settings:
    """Monitor settings of an audit: its tolerance and α, its monitor's half-life."""
    monitor = audit.monitor or Monitor()
    return Settings(
        tolerance=audit.thresholds.tolerance,
        alpha=audit.thresholds.alpha,
        half_life=monitor.half_life,
    )


def increment(
    cells: Cells, audit: Audit, previous: datetime | None, as_of: datetime
) -> pd.DataFrame:
    """Counts (tasks.monitor.increment_counts) of what a run at ``as_of`` consumes after a run
    at ``previous``: the cells of its decisions' window and of its outcomes' window."""
    monitor = audit.monitor or Monitor()
    delay = timedelta(days=monitor.label_delay_days)
    windows = increment_windows(previous, as_of, delay)
    return increment_counts(
        cells(*windows.decisions),
        cells(*windows.outcomes),
        attributes=audit.attributes,
        intersections=audit.intersections,
        reference_groups=audit.reference_groups,
        metrics=monitor.metrics,
    )


def _source_cells(engine, audit: Audit, now: datetime, store: StoreLimits | None = None) -> Cells:
    return lambda start, end: valid_cells(engine, audit, start, end, now, store)


def monitor_run(db_url: str, audit: Audit, as_of: datetime, now: datetime) -> pd.DataFrame:
    """Rows of monitor_results for a run of ``audit`` at ``as_of`` (without run_id): the state
    from the store, the increment from the audit's source (``source_db``, else the store)."""
    with engine_scope(db_url) as store:
        previous_id, previous, state = previous_monitor_state(
            store, audit.name, audit.model_id, as_of
        )
        limits = store_limits(store.dialect)
    with engine_scope(source_url(audit, db_url)) as source:
        counts = increment(_source_cells(source, audit, now, limits), audit, previous, as_of)
    new_state, rows = monitor_update(state, counts, settings_of(audit))
    state_only = [c for c in new_state.columns if c not in rows.columns]
    return rows.join(new_state[state_only]).assign(
        previous_run_id=previous_id, previous_as_of=previous
    )


def backtest(db_url: str, audit: Audit, start: datetime, end: datetime) -> pd.DataFrame:
    """What nightly monitored runs from ``start`` to ``end`` would have said: the increment of
    every night as ``monitor_run`` counts it, fed to the same core (nothing is written). A window
    two nights share (an outcome window one label delay after a decision window) is scanned once.
    """
    schedule = as_of_schedule([], "1D", start=start, end=end)
    nights = [moment.to_pydatetime() for moment in schedule]
    with engine_scope(source_url(audit, db_url)) as source:
        cells = cache(_source_cells(source, audit, datetime.now(UTC)))
        counts = [
            increment(cells, audit, previous, as_of).assign(increment=night)
            for night, (previous, as_of) in enumerate(zip([None, *nights[:-1]], nights))
        ]
    return replay_counts(pd.concat(counts, ignore_index=True), schedule, settings_of(audit))


def monitor_tables(
    db_url: str, audit: Audit, as_of: datetime, now: datetime
) -> dict[type, pd.DataFrame]:
    """The monitor_results rows of a run, as an extra table for flows.pipeline.persist."""
    return {MonitorResult: monitor_run(db_url, audit, as_of, now)}


def backfill_plan(
    db_url: str, audit: Audit, requested: list[datetime]
) -> list[tuple[datetime, bool]]:
    """(as_of, force) in as-of order for a backfill of a monitored audit: the requested as-ofs
    and every stored monitored run after the earliest of them; a stored run after the first new
    as-of is re-run with force (its increment and state changed: a backfill replays in as-of
    order, tasks.increments.replay_plan), earlier ones are idempotent."""
    engine = make_engine(db_url)
    try:
        stored = set(monitored_as_ofs(engine, audit.name, audit.model_id))
    finally:
        engine.dispose()
    requested = [
        m.replace(tzinfo=UTC) if m.tzinfo is None else m.astimezone(UTC) for m in requested
    ]
    if not requested:
        return []
    wanted = sorted(set(requested) | {s for s in stored if s > min(requested)})
    first_new = min((m for m in wanted if m not in stored), default=None)
    return [(m, first_new is not None and m > first_new and m in stored) for m in wanted]
