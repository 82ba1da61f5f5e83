"""Monitored runs and backtests: the database side of tasks.monitor (SPEC section 7, issue 16).

``monitor_run`` is what a monitored audit run adds: it continues the state of the run with the
previous as-of, reads the predictions that became usable since (decisions in (previous, as_of],
outcomes matured in it), and returns the rows of monitor_results. ``backtest`` replays the same
history from the database in memory (tasks.monitor_frame) without writing runs.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd

from biasaudit.db.engine import make_engine
from biasaudit.db.models import MonitorResult
from biasaudit.db.monitor import monitored_as_ofs, previous_monitor_state
from biasaudit.db.source import EmptyWindow, read_predictions
from biasaudit.schemas.config import Audit, Monitor
from biasaudit.schemas.quarantine import split_valid
from biasaudit.tasks.increments import increment_masks
from biasaudit.tasks.monitor import Settings, increment_counts, monitor_update
from biasaudit.tasks.monitor_frame import monitor_frame


def settings_of(audit: Audit) -> Settings:
    """Monitor settings of an audit: its tolerance and α, its monitor's half-life."""
    monitor = audit.monitor or Monitor()
    return Settings(
        tolerance=audit.thresholds.tolerance,
        alpha=audit.thresholds.alpha,
        half_life=monitor.half_life,
    )


def _read_valid(engine, audit: Audit, start, end, now: datetime) -> pd.DataFrame:
    try:
        frame = read_predictions(engine, audit, start, end)
    except EmptyWindow:
        frame = pd.DataFrame(columns=["prediction_id", "predicted_at", "y_true", "y_pred"])
    if frame.empty:
        return frame.assign(**{a: pd.Series(dtype=str) for a in audit.attributes})
    valid, _ = split_valid(frame, audit.attributes, now)
    return valid


def monitor_run(db_url: str, audit: Audit, as_of: datetime, now: datetime) -> pd.DataFrame:
    """Rows of monitor_results for a run of ``audit`` at ``as_of`` (without run_id)."""
    monitor = audit.monitor or Monitor()
    delay = timedelta(days=monitor.label_delay_days)
    engine = make_engine(db_url)
    try:
        previous_id, previous, state = previous_monitor_state(
            engine, audit.name, audit.model_id, as_of
        )
        start = None if previous is None else previous - delay
        valid = _read_valid(engine, audit, start, as_of, now)
    finally:
        engine.dispose()
    masks = increment_masks(valid["predicted_at"], valid["y_true"].notna(), previous, as_of, delay)
    matured = masks.outcomes | masks.unlabelled
    outcomes = valid[matured].assign(y_true=valid["y_true"].where(masks.outcomes)[matured])
    increment = increment_counts(
        valid[masks.decisions],
        outcomes,
        attributes=audit.attributes,
        intersections=audit.intersections,
        reference_groups=audit.reference_groups,
        metrics=monitor.metrics,
    )
    new_state, rows = monitor_update(state, increment, settings_of(audit))
    state_only = [c for c in new_state.columns if c not in rows.columns]
    return rows.join(new_state[state_only]).assign(
        previous_run_id=previous_id, previous_as_of=previous
    )


def backtest(db_url: str, audit: Audit, start: datetime, end: datetime) -> pd.DataFrame:
    """What nightly monitored runs from ``start`` to ``end`` would have said (monitor_frame on
    the audit's source; nothing is written)."""
    monitor = audit.monitor or Monitor()
    engine = make_engine(db_url)
    try:
        valid = _read_valid(engine, audit, None, end, datetime.now(start.tzinfo))
    finally:
        engine.dispose()
    settings = settings_of(audit)
    return monitor_frame(
        valid,
        every="1D",
        label_delay=pd.Timedelta(days=monitor.label_delay_days),
        attributes=audit.attributes,
        intersections=audit.intersections,
        reference_groups=audit.reference_groups,
        metrics=monitor.metrics,
        start=start,
        end=end,
        tolerance=settings.tolerance,
        alpha=settings.alpha,
        half_life=settings.half_life,
    )


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
