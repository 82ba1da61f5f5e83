"""The audit flow: one Prefect flow run audits one model. Wiring only: the body is
flows.pipeline.execute_audit, run here with each database step as a Prefect task that retries and
the pure stages as plain calls (flows.stages.in_flow), and its findings emitted as Prefect events
(flows.events). ``run_audit``, the same body as plain calls
throughout, lives in flows.pipeline (importing it does not import Prefect) and is re-exported here.
"""

from __future__ import annotations

from datetime import datetime

from prefect import flow, runtime

from biasaudit.flows import events, stages
from biasaudit.flows.pipeline import BEGUN_RUNS, execute_audit, run_audit

__all__ = ["audit_flow", "run_audit"]


@flow(name="audit", flow_run_name="audit-{audit_name}", log_prints=True)
def audit_flow(
    audit_name: str,
    config_path: str | None = None,
    db_url: str | None = None,
    as_of: datetime | None = None,
    force: bool = False,
    cron: str | None = None,
    timezone: str | None = None,
) -> dict:
    """Audit one configured model as of ``as_of`` (default now); returns the run's identity.
    Its window's days are calendar days in ``timezone`` (default UTC); with ``cron``, the
    schedule of a scheduled run, the window ends at the schedule's nominal instant at or before
    ``as_of`` (flows.schedule)."""
    flow_run_id = str(runtime.flow_run.id) if runtime.flow_run.id else None
    begun = len(BEGUN_RUNS)
    try:
        outcome = execute_audit(
            audit_name,
            config_path,
            db_url,
            as_of,
            force,
            run=stages.in_flow,
            flow_run_id=flow_run_id,
            cron=cron,
            timezone=timezone,
        )
    except Exception as exc:
        mine = [r["run_id"] for r in BEGUN_RUNS[begun:] if r["record"].audit_name == audit_name]
        run_id = mine[-1] if mine else None
        events.emit(events.FAILED, audit_name, events.failure_payload(audit_name, exc, run_id))
        raise
    for event, payload in events.run_events(outcome):
        events.emit(event, audit_name, payload)
    return outcome


if __name__ == "__main__":
    import sys

    audit_flow(sys.argv[1])
