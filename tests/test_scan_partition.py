"""A partition during the scan: the audit reaches its SOURCE through tests.faultproxy, which stops
forwarding (packets dropped, not refused) once the scan's query has reached the server, so the
query runs and its rows are lost on the way back. The run, a Prefect flow run with the database
steps' retries (as `biasaudit run` and the nightly flow run it), fails within the bound of
docs/operations.md ("A partition during the scan"), leaves no results, its row says failed with
the reason, and the next run, reaching the source directly, succeeds. The store is reached
directly throughout (the run's lease and its failure are written there).
"""

from __future__ import annotations

import time

import pytest

from biasaudit.db.engine import make_engine
from biasaudit.db.retry import RETRIES, StepFailed
from biasaudit.db.store.history import list_runs
from biasaudit.flows.audit import audit_flow
from biasaudit.flows.demo import END

from .faultproxy import FaultProxy
from .test_liveness import AUDIT, CONFIG, _result_rows
from .test_reliability import load_small

pytestmark = pytest.mark.usefixtures("prefect_harness")

STATEMENT, CONNECT = 8.0, 4.0  # the run's timeouts (seconds)
BACKOFF = 0.2 * (2**RETRIES - 1)  # the retries' waits (BIASAUDIT_RETRY_BASE_SECONDS 0.2)
# The bound of docs/operations.md: the scan's call gives up after the statement timeout (and a
# second, on PostgreSQL), each retry's connection through the silent network after the connect
# timeout.
BOUND = STATEMENT + 1 + RETRIES * CONNECT + BACKOFF
SLACK = 5.0  # recording the failure, Prefect's task runs, a loaded machine


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["postgresql", "mariadb"], indirect=True)
def test_a_partition_during_the_scan_fails_the_run_within_its_bound(db_url, tmp_path, monkeypatch):
    """Packets between the audit and its source are dropped once the scan's query reached the
    server: the run ends failed within the source's statement and connect timeouts (and the
    retries' waits), with no results and the reason in its row, and the next run, on a healthy
    network, succeeds."""
    load_small(db_url)
    monkeypatch.setenv("BIASAUDIT_STATEMENT_TIMEOUT_SECONDS", str(STATEMENT))
    monkeypatch.setenv("BIASAUDIT_CONNECT_TIMEOUT_SECONDS", str(CONNECT))
    direct = tmp_path / "direct.toml"
    direct.write_text(CONFIG)
    parsed = make_engine(db_url).url
    with FaultProxy(parsed.host or "127.0.0.1", parsed.port or 0, lifetime=300) as proxy:
        cut = tmp_path / "cut.toml"
        cut.write_text(CONFIG + f'source_db = "{proxy.url(db_url)}"\n')
        proxy.freeze(after=b"FROM predictions", deliver=True)
        with pytest.raises(StepFailed, match="reading the audit's source") as failure:
            audit_flow(AUDIT, str(cut), db_url, END, force=True)
        assert proxy.frozen.is_set()  # the partition met the scan, not an earlier step
        failed_after = time.monotonic() - proxy.frozen_at
        print(f"the run failed {failed_after:.1f} s after the partition (bound {BOUND:.1f} s)")
        (lost,) = list_runs(make_engine(db_url))["id"].tolist()
        result = audit_flow(AUDIT, str(direct), db_url, END, force=True)  # still partitioned
    assert failed_after < BOUND + SLACK, failure.value
    runs = list_runs(make_engine(db_url)).set_index("id")
    assert runs.loc[lost, "status"] == "failed"
    assert "reading the audit's source" in runs.loc[lost, "error"], runs.loc[lost, "error"]
    assert _result_rows(db_url, lost) == [0, 0]
    assert result["new"] and runs.loc[result["run_id"], "status"] == "succeeded"
    assert all(_result_rows(db_url, result["run_id"]))
