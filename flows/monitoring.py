"""Monitored runs and backtests: the stages of tasks.monitor_run wired to the store and the
source.

``monitor_run`` is what a monitored audit run adds: it reads the state of the run with the
previous as-of (db.store.monitor), reads the predictions that became usable since (decisions in
(previous, as_of], outcomes matured in it: tasks.monitor_run.audit_windows) with the audit's own
scan (db.sources.scan: its source database, scan mode, decision from a score, validation and
quarantine), counts the accepted cells and returns the rows of monitor_results
(tasks.monitor_run). ``backtest`` replays the same increments night by night from the database
without writing runs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

import pandas as pd

from biasaudit.db.engine import engine_scope
from biasaudit.db.sources.catalogue import source_url
from biasaudit.db.sources.scan import valid_cells, windows_cells
from biasaudit.db.store.models import MonitorResult, store_limits
from biasaudit.db.store.monitor import monitored_as_ofs, previous_monitor_state
from biasaudit.schemas.config import Audit
from biasaudit.tasks import monitor_run as stage
from biasaudit.tasks.monitor_frame import replay_counts

# The accepted cells of a (start, end] window of the audit's source.
Cells = Callable[[datetime | None, datetime], pd.DataFrame]


def increment(
    cells: Cells, audit: Audit, previous: datetime | None, as_of: datetime
) -> pd.DataFrame:
    """Counts of what a run at ``as_of`` consumes after a run at ``previous``: the cells of its
    decisions' window and of its outcomes' window, read by ``cells``."""
    windows = stage.audit_windows(audit, previous, as_of)
    return stage.audit_increment(cells(*windows.decisions), cells(*windows.outcomes), audit)


def monitor_run(db_url: str, audit: Audit, as_of: datetime, now: datetime) -> pd.DataFrame:
    """Rows of monitor_results for a run of ``audit`` at ``as_of`` (without run_id): the state
    from the store, the increment from the audit's source (``source_db``, else the store)."""
    with engine_scope(db_url) as store:
        previous_id, previous, state = previous_monitor_state(
            store, audit.name, audit.model_id, as_of
        )
        limits = store_limits(store.dialect)
    with engine_scope(source_url(audit, db_url)) as source:
        cells = partial(valid_cells, source, audit, now=now, store=limits)
        counts = increment(cells, audit, previous, as_of)
    return stage.monitor_rows(state, counts, audit, previous_id, previous)


def backtest(db_url: str, audit: Audit, start: datetime, end: datetime) -> pd.DataFrame:
    """What nightly monitored runs from ``start`` to ``end`` would have said: the increment of
    every night as ``monitor_run`` counts it, fed to the same core (nothing is written). The
    nights' windows (decisions and outcomes, each distinct one once) come from one read of the
    source (db.sources.scan.windows_cells)."""
    schedule = stage.backtest_nights(start, end)
    nights = [moment.to_pydatetime() for moment in schedule]
    plans = [
        stage.audit_windows(audit, previous, as_of)
        for previous, as_of in zip([None, *nights[:-1]], nights)
    ]
    windows = list(dict.fromkeys(w for plan in plans for w in (plan.decisions, plan.outcomes)))
    with engine_scope(source_url(audit, db_url)) as source:
        read = windows_cells(source, audit, windows, now=datetime.now(UTC))
    cells = dict(zip(windows, read))
    counts = [
        stage.audit_increment(cells[plan.decisions], cells[plan.outcomes], audit).assign(
            increment=night
        )
        for night, plan in enumerate(plans)
    ]
    return replay_counts(pd.concat(counts, ignore_index=True), schedule, stage.settings_of(audit))


def monitor_tables(
    db_url: str, audit: Audit, as_of: datetime, now: datetime
) -> dict[type, pd.DataFrame]:
    """The monitor_results rows of a run, as an extra table for flows.pipeline.persist."""
    return {MonitorResult: monitor_run(db_url, audit, as_of, now)}


def backfill_plan(
    db_url: str, audit: Audit, requested: list[datetime]
) -> list[tuple[datetime, bool]]:
    """(as_of, force) in as-of order for a backfill of a monitored audit
    (tasks.monitor_run.backfill_plan over the stored monitored runs)."""
    with engine_scope(db_url) as store:
        stored = monitored_as_ofs(store, audit.name, audit.model_id)
    return stage.backfill_plan(stored, requested)
