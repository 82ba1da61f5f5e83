"""What a process pays outside the statistics: the first audit's fresh pages, Prefect's
heartbeats in the flows the CLI runs, the interpreter's last collections at a command's exit."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

AUDITS = """
import json, resource, warnings
import numpy as np, pandas as pd
import biasaudit
rng = np.random.default_rng(1)
n = 20_000
frame = pd.DataFrame({
    "y_true": rng.integers(0, 2, n).astype(float),
    "y_pred": rng.integers(0, 2, n),
    "race": rng.choice(list("ABCD"), n, p=[0.6, 0.25, 0.1, 0.05]),
    "sex": rng.choice(list("FM"), n),
})
faults = []
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        biasaudit.audit_frame(frame, attributes=["race", "sex"], metrics=["tpr", "fpr"])
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults))
"""


def _fresh(code: str, **env: str) -> str:
    """The last line a fresh interpreter prints running ``code``; ``env`` added to its
    environment (glibc's own MALLOC_ thresholds removed)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")
def test_an_audit_takes_its_arrays_from_freed_memory():
    """Two audits of a frame in a fresh process: the second takes almost no fresh page (with
    glibc's default thresholds, measured: 35,000 and 11,900 minor page faults; with tasks.memory
    22,700 and 18; before planning's rewrite 195,000 and 181,000 against 20,000 and 550)."""
    import json

    first, second = json.loads(_fresh(AUDITS))
    assert second < 2_000, (first, second)


def test_thresholds_set_in_the_environment_are_left_alone(monkeypatch):
    """An operator's MALLOC_MMAP_THRESHOLD_ (glibc reads it at start) is not overridden."""
    from biasaudit.tasks.memory import keep_freed_memory

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    keep_freed_memory.cache_clear()
    try:
        assert keep_freed_memory() is False
    finally:
        keep_freed_memory.cache_clear()


PREFECT_ENVIRONMENT = """
from prefect.settings import get_current_settings
from biasaudit.flows.cli.server import _prefect_environment
_prefect_environment()
print(get_current_settings().flows.heartbeat_frequency)
"""


@pytest.mark.parametrize(
    ("configured", "expected"), [({}, "None"), ({"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "60"}, "60")]
)
def test_the_cli_flow_runs_send_heartbeats_only_where_configured(configured, expected):
    """The flow runs of `run`, `demo` and `backfill` send no Prefect heartbeat (each ended up to
    1 s late waiting for the heartbeat thread), unless the operator set their frequency. The
    server's URL is set (never contacted), so no temporary server starts."""
    env = {"PREFECT_API_URL": "http://127.0.0.1:9/api", **configured}
    assert _fresh(PREFECT_ENVIRONMENT, **env) == expected


def test_the_nightly_audit_subflows_send_no_heartbeat_unless_configured():
    """The nightly flow's audits run as subflows in its process, inside ``without_heartbeats``:
    their frequency is off by default and the operator's where set."""
    from prefect.settings import (
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        get_current_settings,
        temporary_settings,
    )

    from biasaudit.flows.heartbeats import without_heartbeats

    with without_heartbeats():
        assert get_current_settings().flows.heartbeat_frequency is None
    operator = temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 90})
    with operator, without_heartbeats():  # entered after the operator's setting
        assert get_current_settings().flows.heartbeat_frequency == 90


EXIT = """
import atexit, gc, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
from biasaudit.flows.cli import app
try:
    app(["metrics"])
except SystemExit:
    pass
"""


def test_a_command_exits_without_the_final_collections():
    """A CLI process freezes the garbage collector at exit (after Prefect's exit handlers, before
    the interpreter's own collections, which took 1-2 s with Prefect and pandas loaded)."""
    assert _fresh(EXIT) == "frozen at exit: True"
