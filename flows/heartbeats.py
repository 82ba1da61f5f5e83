"""Prefect's flow-run heartbeats: one per process, not one per flow run in it.

Prefect 3.8 sends a heartbeat event from every flow run (every 180 s by default, for an
automation that marks a silent run crashed) and, at the end of each run, joins the heartbeat
thread, which sleeps in whole seconds: a flow run of a few seconds ends up to 1 s late, and a
nightly of subflows or a backfill of 60 periods pays it for each. A subflow runs in its parent's
process, whose own heartbeat already shows that process alive; the flows the CLI runs in the
foreground (``run``, ``demo``, ``backfill``) end with the command, and every audit run proves its
own liveness in the database (db.store.runs: lease and heartbeat). So the CLI's flow runs and the
nightly flow's audit subflows send none, unless the operator sets
``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` (environment or profile): then every flow run keeps Prefect's
heartbeat at that frequency.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any


def heartbeat_updates() -> dict[Any, Any]:
    """The settings update that turns flow-run heartbeats off: none where the operator set them."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings

    if "heartbeat_frequency" in get_current_settings().flows.model_fields_set:
        return {}
    return {PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}


def without_heartbeats() -> AbstractContextManager[Any]:
    """A block whose flow runs send no heartbeat (unless the operator set their frequency)."""
    from prefect.settings import temporary_settings

    updates = heartbeat_updates()
    return temporary_settings(updates=updates) if updates else nullcontext()
