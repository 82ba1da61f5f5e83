"""The Prefect events of an audit run, for automations to turn into a message, an e-mail or a
ticket (docs/operations.md, "Events"). Each names the audit as its resource
(``biasaudit.audit.NAME``) and carries counts and identities only: no secret, no group name, no
value from the data beyond what the run's one summary line prints.

- ``biasaudit.audit.flagged``: a new run flagged comparisons (payload ``findings``: how many);
- ``biasaudit.monitor.alarm``: a new run of a monitored audit raised alarms (``alarms``);
- ``biasaudit.run.failed``: a run failed (``error``: the exception's type, ``run_id`` where a
  run had begun).

A run that returns a stored identical run (unchanged input) emits nothing: its findings were
told when they were new.
"""

from __future__ import annotations

from typing import Any

FLAGGED = "biasaudit.audit.flagged"
ALARM = "biasaudit.monitor.alarm"
FAILED = "biasaudit.run.failed"


def resource(audit: str) -> dict[str, str]:
    """The audit as a Prefect event resource."""
    return {"prefect.resource.id": f"biasaudit.audit.{audit}", "prefect.resource.name": audit}


def run_events(outcome: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(event, payload) of each event a finished run emits (flows.pipeline's outcome)."""
    if not outcome.get("new"):
        return []
    identity = {k: outcome[k] for k in ("audit", "model", "run_id", "version")}
    events = []
    if outcome.get("flagged"):
        events.append((FLAGGED, {**identity, "findings": int(outcome["flagged"])}))
    if outcome.get("alarms"):
        events.append((ALARM, {**identity, "alarms": int(outcome["alarms"])}))
    return events


def failure_payload(audit: str, error: BaseException, run_id: int | None) -> dict[str, Any]:
    """The payload of a failed run's event: its audit, the error's type (its message may quote
    the data or the configuration) and its run id where one had begun."""
    return {"audit": audit, "error": type(error).__name__, "run_id": run_id}


def emit(event: str, audit: str, payload: dict[str, Any]) -> None:
    """Emit ``event`` through Prefect (sent with the flow run's other events)."""
    from prefect.events import emit_event

    emit_event(event=event, resource=resource(audit), payload=payload)
