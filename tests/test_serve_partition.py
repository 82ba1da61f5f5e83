"""A partition between `biasaudit serve` and its Prefect server: serve reaches the Prefect API
through a loopback proxy (tests/faultproxy.py) that stops forwarding, without closing a socket,
while a scheduled run's audit is in flight, and forwards again PARTITION seconds later.

Then nothing is lost and nothing is stored twice: the in-flight audit commits once, as
succeeded; Prefect says the nightly run and its audit subflow completed; no `running` row is
left; serve is still serving, and a run that the scheduler creates after the heal fires by
itself and completes.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from datetime import datetime
from urllib.parse import urlparse

import pytest
from sqlalchemy import text

from biasaudit.db.engine import make_engine
from tests.faultproxy import FaultProxy
from tests.test_server import (
    BIN,
    SCHEDULED_AUDIT,
    _client_env,
    _completed_scheduled_runs,
    _demo_database,
    _get,
    prefect_server,  # noqa: F401 - the fixture
)
from tests.test_server import _stop as stop_serving

PARTITION = 45  # seconds: over two of Prefect's request deadlines (20 s)
RECOVERY = 240  # seconds after the heal for the in-flight run to end and a new run to fire


def _running(engine) -> int | None:
    with contextlib.suppress(Exception), engine.connect() as connection:
        return connection.scalar(text("SELECT id FROM audit_runs WHERE status = 'running'"))
    return None


def _freeze_in_flight(url: str, proxy: FaultProxy, serve, seen: dict) -> None:
    """Freeze the proxy the moment an audit run is `running` (its id in ``seen``), thaw it
    PARTITION seconds later."""
    engine = make_engine(url)
    while serve.poll() is None and (run_id := _running(engine)) is None:
        time.sleep(0.05)
    if serve.poll() is not None:
        return
    proxy.freeze()
    seen["run_id"], seen["frozen"] = run_id, time.time()
    time.sleep(PARTITION)
    proxy.thaw()
    seen["thawed"] = time.time()


@pytest.mark.slow
def test_a_partition_from_prefect_mid_run_loses_nothing_and_serve_recovers(
    prefect_server,  # noqa: F811
    postgres_server_url,
    tmp_path,
):
    url = postgres_server_url
    _slow_store(url, 0.005)  # about 15 s of scan
    engine = make_engine(url)
    config = tmp_path / "partition.toml"
    config.write_text(SCHEDULED_AUDIT + 'source = "slow_predictions"\n')
    name = "partition"
    api = urlparse(prefect_server)
    assert api.hostname and api.port
    with FaultProxy(api.hostname, api.port, lifetime=900) as proxy:
        serve = subprocess.Popen(
            [str(BIN / "biasaudit"), "serve", "-c", str(config), "--db", url]
            + ["--cron", "* * * * *", "--name", name],
            env=_client_env(f"http://127.0.0.1:{proxy.port}/api"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=tmp_path,
        )
        seen: dict = {}
        cut = threading.Thread(
            target=_freeze_in_flight, args=(url, proxy, serve, seen), daemon=True
        )
        cut.start()
        try:
            deadline = time.time() + 240
            while "thawed" not in seen:
                assert serve.poll() is None, "serve stopped before the heal"
                assert time.time() < deadline, "no audit was in flight within 240 s"
                time.sleep(1)
            deployment = _get(f"{prefect_server}/deployments/name/nightly/{name}")
            assert isinstance(deployment, dict)
            healed = seen["thawed"]
            while True:
                completed = _completed_scheduled_runs(prefect_server, deployment["id"])
                after = [r for r in completed if _epoch(r["expected_start_time"]) > healed]
                if after and _running(engine) is None:
                    break
                assert serve.poll() is None, "serve stopped after the heal"
                assert time.time() < healed + RECOVERY, "no new run completed after the heal"
                time.sleep(2)
            recovered = time.time() - healed
        finally:
            served = stop_serving(serve)
    print(f"partition {PARTITION} s; a new scheduled run completed {recovered:.0f} s after it")
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT id, status, flow_run_id, version FROM audit_runs ORDER BY id")
        ).all()
    # the in-flight run committed once, as succeeded; later runs of unchanged input reuse it
    assert [(r.id, r.status, r.version) for r in rows] == [(seen["run_id"], "succeeded", 1)], (
        rows,
        served[-3000:],
    )
    subflow = _get(f"{prefect_server}/flow_runs/{rows[0].flow_run_id}")
    assert isinstance(subflow, dict) and subflow["state_type"] == "COMPLETED", subflow
    parent = _get(f"{prefect_server}/task_runs/{subflow['parent_task_run_id']}")
    assert isinstance(parent, dict)
    nightly = _get(f"{prefect_server}/flow_runs/{parent['flow_run_id']}")
    assert isinstance(nightly, dict) and nightly["state_type"] == "COMPLETED", nightly
    assert "stopped serving nightly/partition" in served, served[-3000:]


def _epoch(moment: str) -> float:
    return datetime.fromisoformat(moment).timestamp()


# Prefect's own tolerance, shortened for the test: each request's deadline, its retries, and the
# runner's poll interval (the poll loop gives up after 3 consecutive failed polls).
SHORT_PREFECT = {
    "PREFECT_API_REQUEST_TIMEOUT": "5",
    "PREFECT_CLIENT_MAX_RETRIES": "0",
    "PREFECT_RUNNER_POLL_FREQUENCY": "2",
}
TOLERANCE = 60  # 3 polls, each its request deadline and the poll's interval, and the exit


def _slow_store(url: str, seconds_a_row: float) -> None:
    """The session's PostgreSQL store with the demo predictions and a view reading them slowly."""
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    _demo_database(url)
    with engine.begin() as connection:
        connection.execute(
            text(
                "CREATE VIEW slow_predictions AS SELECT p.* FROM predictions p "
                f"WHERE length(p.prediction_id || pg_sleep({seconds_a_row})::text) > 0"
            )
        )
    engine.dispose()


@pytest.mark.slow
def test_a_partition_past_prefects_tolerance_ends_serve_in_one_line(
    prefect_server,  # noqa: F811
    postgres_server_url,
    tmp_path,
):
    """A partition that outlasts Prefect's own tolerance (its runner stops polling after 3
    failed polls in a row; shortened here through Prefect's settings): serve exits 1 within
    that bound with one `error:` line (no traceback), and leaves no process behind."""
    url = postgres_server_url
    _slow_store(url, 0.005)
    config = tmp_path / "long.toml"
    config.write_text(SCHEDULED_AUDIT + 'source = "slow_predictions"\n')
    api = urlparse(prefect_server)
    assert api.hostname and api.port
    engine = make_engine(url)
    with FaultProxy(api.hostname, api.port, lifetime=900) as proxy:
        serve = subprocess.Popen(
            [str(BIN / "biasaudit"), "serve", "-c", str(config), "--db", url]
            + ["--cron", "* * * * *", "--name", "long-partition"],
            env=_client_env(f"http://127.0.0.1:{proxy.port}/api", **SHORT_PREFECT),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=tmp_path,
        )
        try:
            deadline = time.time() + 240
            while (run_id := _running(engine)) is None:
                assert serve.poll() is None and time.time() < deadline, "no audit in flight"
                time.sleep(0.05)
            proxy.freeze()
            frozen = time.time()
            with contextlib.suppress(subprocess.TimeoutExpired):
                serve.wait(timeout=TOLERANCE + 60)
            ended = time.time() - frozen
            code = serve.poll()
            leftover = subprocess.run(
                ["pgrep", "-s", str(serve.pid)], capture_output=True, text=True, check=False
            ).stdout.strip()
        finally:
            served = stop_serving(serve)
            print(served[-1500:])
    print(f"serve exit {code} {ended:.1f} s after the cut; left: {leftover!r}")
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT id, status, error FROM audit_runs")).all()
    print(rows)
    assert code == 1, served[-3000:]
    assert ended < TOLERANCE + 15, ended
    lines = served.strip().splitlines()
    assert lines[-1].startswith("error: serve stopped: the Prefect API at "), served[-3000:]
    assert "did not answer 3 polls for scheduled runs in a row" in lines[-1]
    # serve's own poll failures are no traceback (the flow run's process logs its own failure)
    assert "critical_service_loop" not in served and "ExceptionGroup" not in served
    assert leftover == "", f"processes left: {leftover}"
    # the run in flight committed (the store was never cut) and its line says so
    assert [(r.id, r.status) for r in rows] == [(run_id, "succeeded")], rows
    assert f"audit credit-race: run {run_id} (v1), new" in served, served[-3000:]
