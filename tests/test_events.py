"""Prefect events of audit runs: which a run emits, with what payload, and that a real Prefect
server's automation fires on a flagged run."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

from biasaudit.flows import events
from biasaudit.flows.demo import INJECTED

from .test_server import (
    BIN,
    SCHEDULED_AUDIT,
    _client_env,
    _demo_database,
    prefect_server,  # noqa: F401 - the fixture
)

OUTCOME = {"audit": "a", "model": "m", "run_id": 7, "version": 3, "new": True, "report": "x"}


def test_a_new_run_emits_its_flags_and_alarms_by_count_and_identity_only():
    assert events.run_events({**OUTCOME, "flagged": 0, "alarms": 0}) == []
    assert events.run_events({**OUTCOME, "flagged": 2, "alarms": 1}) == [
        (events.FLAGGED, {"audit": "a", "model": "m", "run_id": 7, "version": 3, "findings": 2}),
        (events.ALARM, {"audit": "a", "model": "m", "run_id": 7, "version": 3, "alarms": 1}),
    ]
    # an unchanged input returns the stored run: told when it was new, not again
    assert events.run_events({**OUTCOME, "new": False, "flagged": 2, "alarms": 1}) == []
    secret = RuntimeError("could not connect to postgresql://u:hunter2@db/x")
    assert events.failure_payload("a", secret, None) == {
        "audit": "a", "error": "RuntimeError", "run_id": None,
    }  # fmt: skip


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def _events(api: str, name: str) -> list[dict]:
    found = _post(f"{api}/events/filter", {"filter": {"event": {"name": [name]}}, "limit": 50})
    return found["events"]


@pytest.mark.slow
def test_a_flagged_run_fires_a_real_servers_automation(prefect_server, tmp_path):  # noqa: F811
    """An automation on ``biasaudit.audit.flagged`` (as docs/operations.md shows) fires when
    ``biasaudit run`` flags the demo's injected disparity: the server emits
    ``prefect.automation.triggered`` for it, with the flagged event (findings, run id, version;
    no group name) as its trigger."""
    url = f"sqlite:///{tmp_path / 'flagged.db'}"
    _demo_database(url)
    automation = _post(
        f"{prefect_server}/automations/",
        {
            "name": "biasaudit flagged",
            "trigger": {
                "type": "event",
                "match": {"prefect.resource.id": "biasaudit.audit.*"},
                "expect": [events.FLAGGED],
                "posture": "Reactive",
                "threshold": 1,
                "within": 0,
            },
            "actions": [{"type": "do-nothing"}],
        },
    )
    config = tmp_path / "flagged.toml"
    config.write_text(SCHEDULED_AUDIT)
    done = subprocess.run(
        [str(BIN / "biasaudit"), "run", "credit-race", "-c", str(config), "--db", url],
        env=_client_env(prefect_server),
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    deadline = time.monotonic() + 120
    fired: list[dict] = []
    while not fired and time.monotonic() < deadline:
        fired = [
            e
            for e in _events(prefect_server, "prefect.automation.triggered")
            if e["resource"]["prefect.resource.id"] == f"prefect.automation.{automation['id']}"
        ]
        time.sleep(2)
    assert fired, "the automation did not fire within 120 s"
    (flagged,) = _events(prefect_server, events.FLAGGED)
    assert flagged["resource"]["prefect.resource.id"] == "biasaudit.audit.credit-race"
    payload = flagged["payload"]
    assert payload["findings"] >= 1 and payload["model"] == "credit-scorer"
    assert set(payload) == {"audit", "model", "run_id", "version", "findings"}
    assert not any(group in json.dumps(flagged) for _, _, group, _, _ in INJECTED)
