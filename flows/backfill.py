"""Backfill: run an audit as of each past calendar period, oldest first, as one Prefect flow.

Periods are ``Nd`` (N days) or ``Nmo`` (N calendar months: the 31st of January plus one month is
the 28th or 29th of February). The as-of moments are ``start``, ``start + period``, ... and
``end`` itself, so the range is covered whole even when it is not a whole number of periods. Each
period is one audit subflow with ``as_of`` at the period's end (its database steps retry); the
audit's own window ("last_30_days", ...) decides which predictions it sees. A period whose window
is empty is recorded as a failed run and the backfill goes on; the outcomes name each failure.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pandas as pd
from prefect import flow

from biasaudit.db.engine import database_url
from biasaudit.flows.audit import audit_flow
from biasaudit.flows.config_files import default_config_path, load_audit
from biasaudit.flows.logs import install_short_errors, one_line
from biasaudit.flows.monitoring import backfill_plan

_PERIOD = re.compile(r"^\s*(\d+)\s*(d|mo)\s*$")
MAX_PERIODS = 10_000


def parse_period(text: str) -> pd.DateOffset:
    """``'7d'`` -> 7 days, ``'1mo'`` -> one calendar month; ValueError otherwise."""
    match = _PERIOD.match(text)
    if not match or int(match.group(1)) < 1:
        raise ValueError(f"--every takes Nd (days) or Nmo (calendar months), N >= 1; not {text!r}")
    n = int(match.group(1))
    return pd.DateOffset(days=n) if match.group(2) == "d" else pd.DateOffset(months=n)


def periods(start: datetime, end: datetime, every: pd.DateOffset) -> list[datetime]:
    """The as-of moments start, start + every, ... before end, then end itself."""
    if end < start:
        raise ValueError(f"the backfill ends ({end:%Y-%m-%d}) before it starts ({start:%Y-%m-%d})")
    moments, k = [], 0
    while (moment := (pd.Timestamp(start) + every * k).to_pydatetime()) < end:
        moments.append(moment)
        k += 1
        if k > MAX_PERIODS:
            raise ValueError(f"more than {MAX_PERIODS} periods: choose a longer --every")
    moments.append(end)
    return moments


@flow(name="backfill", log_prints=True)
def backfill_flow(
    audit_name: str,
    start: datetime,
    end: datetime,
    every: str = "1d",
    config_path: str | None = None,
    db_url: str | None = None,
) -> list[dict]:
    """Audit ``audit_name`` as of every period from ``start`` to ``end``; returns each outcome."""
    install_short_errors()
    outcomes = []
    plan = [(as_of, False) for as_of in periods(start, end, parse_period(every))]
    audit = load_audit(Path(config_path or default_config_path()), audit_name)
    if audit.monitor is not None:  # monitored: later stored runs replay in as-of order
        plan = backfill_plan(database_url(db_url), audit, [as_of for as_of, _ in plan])
    for as_of, force in plan:
        state = audit_flow(audit_name, config_path, db_url, as_of, force, return_state=True)
        if state.is_completed():
            outcomes.append({"as_of": as_of.isoformat(), **state.result()})
        else:
            error = state.result(raise_on_failure=False)
            message = one_line(error) if isinstance(error, BaseException) else state.message
            outcomes.append({"as_of": as_of.isoformat(), "error": message})
    ok = sum("error" not in o for o in outcomes)
    print(f"backfill of {audit_name}: {ok} of {len(outcomes)} periods audited")
    return outcomes
