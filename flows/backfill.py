"""Backfill: run an audit as of each past period, oldest first, as one Prefect flow.

Each period is one audit subflow with ``as_of`` at the period's end; the audit's own window
("last_30_days", ...) decides which predictions it sees. A period whose window is empty is
recorded as a failed run and the backfill goes on.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from biasaudit.db.engine import database_url
from biasaudit.flows.audit import audit_flow, default_config_path
from biasaudit.flows.monitoring import backfill_plan
from biasaudit.schemas.config import load_config
from prefect import flow


def periods(start: datetime, end: datetime, every: timedelta) -> list[datetime]:
    """The as-of moments start, start + every, ... up to and including end."""
    if every <= timedelta(0):
        raise ValueError("the period must be positive")
    moments, moment = [], start
    while moment <= end:
        moments.append(moment)
        moment += every
    return moments


@flow(name="backfill", log_prints=True)
def backfill_flow(
    audit_name: str,
    start: datetime,
    end: datetime,
    every_days: int = 1,
    config_path: str | None = None,
    db_url: str | None = None,
) -> list[dict]:
    """Audit ``audit_name`` as of every period from ``start`` to ``end``; returns each outcome."""
    outcomes = []
    plan = [(as_of, False) for as_of in periods(start, end, timedelta(days=every_days))]
    audit = load_config(Path(config_path or default_config_path())).get(audit_name)
    if audit.monitor is not None:  # monitored: later stored runs replay in as-of order
        plan = backfill_plan(database_url(db_url), audit, [as_of for as_of, _ in plan])
    for as_of, force in plan:
        state = audit_flow(audit_name, config_path, db_url, as_of, force, return_state=True)
        if state.is_completed():
            outcomes.append({"as_of": as_of.isoformat(), **state.result()})
        else:
            outcomes.append({"as_of": as_of.isoformat(), "error": state.message})
    ok = sum("error" not in o for o in outcomes)
    print(f"backfill of {audit_name}: {ok} of {len(outcomes)} periods audited")
    return outcomes
