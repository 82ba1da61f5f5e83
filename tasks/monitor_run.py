"""The monitor stage of a monitored audit run, from the audit's configuration: its settings, the
windows an increment reads, the increment's counts and the run's monitor_results rows (pure;
flows.monitoring wires them to the store and the source)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd

from biasaudit.schemas.config import Audit, Monitor
from biasaudit.tasks.increments import IncrementWindows, as_of_schedule, increment_windows
from biasaudit.tasks.monitor import Settings, increment_counts, monitor_update


def settings_of(audit: Audit) -> Settings:
    """Monitor settings of an audit: its tolerance and α, its monitor's half-life."""
    monitor = audit.monitor or Monitor()
    return Settings(
        tolerance=audit.thresholds.tolerance,
        alpha=audit.thresholds.alpha,
        half_life=monitor.half_life,
    )


def audit_windows(audit: Audit, previous: datetime | None, as_of: datetime) -> IncrementWindows:
    """The windows a run of ``audit`` at ``as_of`` consumes after a run at ``previous``
    (tasks.increments.increment_windows at the monitor's label delay)."""
    delay = timedelta(days=(audit.monitor or Monitor()).label_delay_days)
    return increment_windows(previous, as_of, delay)


def audit_increment(decisions: pd.DataFrame, outcomes: pd.DataFrame, audit: Audit) -> pd.DataFrame:
    """Counts (tasks.monitor.increment_counts) of an increment of ``audit`` from the accepted
    cells of its decisions' window and of its outcomes' window."""
    return increment_counts(
        decisions,
        outcomes,
        attributes=audit.attributes,
        intersections=audit.intersections,
        reference_groups=audit.reference_groups,
        metrics=(audit.monitor or Monitor()).metrics,
    )


def monitor_rows(
    state: pd.DataFrame,
    counts: pd.DataFrame,
    audit: Audit,
    previous_id: int | None,
    previous: datetime | None,
) -> pd.DataFrame:
    """Rows of monitor_results (without run_id): the run's rows of tasks.monitor.monitor_update
    on the previous run's ``state`` and this increment's ``counts``, with the new state and the
    previous run they continue, and the settings they were tested at (tolerance, alpha)."""
    settings = settings_of(audit)
    new_state, rows = monitor_update(state, counts, settings)
    state_only = [c for c in new_state.columns if c not in rows.columns]
    return rows.join(new_state[state_only]).assign(
        previous_run_id=previous_id,
        previous_as_of=previous,
        tolerance=settings.tolerance,
        alpha=settings.alpha,
    )


def backtest_nights(start: datetime, end: datetime) -> pd.DatetimeIndex:
    """The as-ofs of nightly runs from ``start`` to ``end``."""
    return as_of_schedule([], "1D", start=start, end=end)


def backfill_plan(
    stored: list[datetime], requested: list[datetime]
) -> list[tuple[datetime, bool]]:
    """(as_of, force) in as-of order for a backfill of a monitored audit: the requested as-ofs
    and every ``stored`` monitored run after the earliest of them; a stored run after the first
    new as-of is re-run with force (its increment and state changed: a backfill replays in as-of
    order, tasks.increments.replay_plan), earlier ones are idempotent."""
    requested = [
        m.replace(tzinfo=UTC) if m.tzinfo is None else m.astimezone(UTC) for m in requested
    ]
    if not requested:
        return []
    wanted = sorted(set(requested) | {s for s in stored if s > min(requested)})
    first_new = min((m for m in wanted if m not in stored), default=None)
    return [(m, first_new is not None and m > first_new and m in stored) for m in wanted]
