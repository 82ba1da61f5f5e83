"""Bounded against Prefect: with the Prefect API cut mid-flow (packets no longer forwarded, the
connections left open, as a partition leaves them) right after the audit's run has committed,
`biasaudit run` says the run is stored (its id and version), exits non-zero within its stated
bound (BIASAUDIT_PREFECT_WAIT_SECONDS after the run is stored, plus the time to print and stop),
and leaves no process behind.

The cut is a loopback proxy (tests/faultproxy.py, ``freeze``) between the command and a real
`prefect server start`; it freezes the moment the store shows the run committed as succeeded
(polled every 10 ms: Prefect's own traffic, partly over a compressed websocket, names no step).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from urllib.parse import urlparse

import pytest
from sqlalchemy import text

from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import list_runs
from tests.faultproxy import FaultProxy
from tests.test_server import (
    BIN,
    SCHEDULED_AUDIT,
    _client_env,
    _demo_database,
    prefect_server,  # noqa: F401 - the fixture
)

WAIT = 20  # BIASAUDIT_PREFECT_WAIT_SECONDS for the test
SLACK = 25  # printing, stopping, and a loaded machine's start-up of the command's exit


def _freeze_when_stored(
    url: str, proxy: FaultProxy, command: subprocess.Popen, cut_at: list[float]
) -> None:
    """Cut Prefect the moment the run's row is committed as succeeded (its time in ``cut_at``)."""
    engine = make_engine(url)
    query = text("SELECT count(*) FROM audit_runs WHERE status = 'succeeded'")
    while command.poll() is None:
        with contextlib.suppress(Exception), engine.connect() as connection:
            if connection.scalar(query):
                proxy.freeze()
                cut_at.append(time.monotonic())
                return
        time.sleep(0.01)


def _run_through(proxy: FaultProxy, config, url: str, tmp_path) -> subprocess.Popen:
    """``biasaudit run credit-race`` in a session of its own, its Prefect API through ``proxy``,
    its output (both streams) in its stdout."""
    env = _client_env(
        f"http://127.0.0.1:{proxy.port}/api", BIASAUDIT_PREFECT_WAIT_SECONDS=str(WAIT)
    )
    return subprocess.Popen(
        [str(BIN / "biasaudit"), "run", "credit-race", "-c", str(config), "--db", url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=tmp_path,
    )


@pytest.mark.slow
def test_a_prefect_api_cut_after_the_run_commits_ends_the_command_in_bound(
    prefect_server,  # noqa: F811
    tmp_path,
):
    url = f"sqlite:///{tmp_path / 'cut.db'}"
    _demo_database(url)
    config = tmp_path / "cut.toml"
    config.write_text(SCHEDULED_AUDIT)
    api = urlparse(prefect_server)
    assert api.hostname and api.port
    with FaultProxy(api.hostname, api.port, lifetime=600) as proxy:
        started = time.monotonic()
        command = _run_through(proxy, config, url, tmp_path)
        cut_at: list[float] = []
        cut = threading.Thread(
            target=_freeze_when_stored, args=(url, proxy, command, cut_at), daemon=True
        )
        cut.start()
        try:
            out, _ = command.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            command.kill()
            out, _ = command.communicate()
            pytest.fail(f"`biasaudit run` still running 300 s in: {out.decode()[-2000:]}")
        ended = time.monotonic()
        elapsed = ended - started
        frozen_at = proxy.frozen.is_set()
    printed = out.decode(errors="replace")
    tail = printed[-2000:]
    assert frozen_at and cut_at, tail
    after_cut = ended - cut_at[0]
    print(f"exit {command.returncode} {elapsed:.1f} s after start, {after_cut:.1f} s after the cut")
    print(tail[-700:])
    runs = list_runs(make_engine(url))
    assert runs["status"].tolist() == ["succeeded"], tail
    run_id = int(runs["id"].iloc[0])
    assert command.returncode != 0, tail
    assert re.search(rf"run {run_id} \(v1\) of 'credit-race' succeeded and is stored", printed), (
        tail
    )
    assert after_cut < WAIT + SLACK, tail  # the bound stated in docs/operations.md
    leftover = subprocess.run(
        ["pgrep", "-s", str(command.pid)], capture_output=True, text=True, check=False
    )
    assert leftover.stdout.strip() == "", f"processes left: {leftover.stdout}"


def test_a_flow_failing_in_prefect_after_storing_its_run_says_it_is_stored():
    """A flow that raises after its run is stored (Prefect's request deadline, say) is one line
    naming the stored run by id and version; one that fails before storing re-raises as is."""
    import httpx

    from biasaudit.flows.cli.common import Mistake
    from biasaudit.flows.cli.server import bounded_flow
    from biasaudit.flows.pipeline import STORED_RUNS

    def stored_then_cut() -> None:
        STORED_RUNS.append({"run_id": 7, "version": 2, "audit": "a"})
        raise httpx.ReadTimeout("timed out")

    with pytest.raises(Mistake) as caught:
        bounded_flow(stored_then_cut)
    assert str(caught.value) == (
        "run 7 (v2) of 'a' succeeded and is stored; then Prefect failed: ReadTimeout: timed out "
        "(write the report with `biasaudit report 7`)"
    )

    def cut_before() -> None:
        raise httpx.ReadTimeout("timed out")

    with pytest.raises(httpx.ReadTimeout):
        bounded_flow(cut_before)


def _freeze_when_begun(
    url: str, proxy: FaultProxy, command: subprocess.Popen, cut_at: list
) -> None:
    """Cut Prefect the moment the run's row is committed as `running` (before its results), and
    slow its scan down from then on (20 ms a row: a minute), so it cannot commit meanwhile."""
    engine = make_engine(url)
    query = text("SELECT count(*) FROM audit_runs WHERE status = 'running'")
    while command.poll() is None:
        with contextlib.suppress(Exception), engine.begin() as connection:
            if connection.scalar(query):
                proxy.freeze()
                connection.execute(text("UPDATE scan_delay SET seconds = 0.02"))
                cut_at.append(time.monotonic())
                return
        time.sleep(0.01)


@pytest.mark.slow
def test_a_prefect_api_cut_before_the_run_commits_ends_the_command_in_bound(
    prefect_server,  # noqa: F811
    postgres_server_url,
    tmp_path,
):
    """With the Prefect API cut while the run is `running` (its scan still reading), `biasaudit
    run` exits 1 within BIASAUDIT_PREFECT_WAIT_SECONDS of Prefect's last answer (plus the time to
    print and stop), says the run was NOT stored, leaves no process behind and no `running` row:
    the run is marked failed with the reason, and the next run of the audit succeeds."""
    from biasaudit.flows.pipeline import run_audit

    url = postgres_server_url
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    _demo_database(url)
    with engine.begin() as connection:  # each row waits scan_delay's seconds (0 for the checks)
        connection.execute(
            text("CREATE TABLE scan_delay (seconds float); INSERT INTO scan_delay VALUES (0)")
        )
        connection.execute(
            text(
                "CREATE VIEW slow_predictions AS SELECT p.* FROM predictions p WHERE "
                "length(p.prediction_id || pg_sleep((SELECT seconds FROM scan_delay))::text) > 0"
            )
        )
    config = tmp_path / "cut.toml"
    config.write_text(SCHEDULED_AUDIT + 'source = "slow_predictions"\n')
    api = urlparse(prefect_server)
    assert api.hostname and api.port
    with FaultProxy(api.hostname, api.port, lifetime=600) as proxy:
        command = _run_through(proxy, config, url, tmp_path)
        cut_at: list[float] = []
        threading.Thread(
            target=_freeze_when_begun, args=(url, proxy, command, cut_at), daemon=True
        ).start()
        try:
            out, _ = command.communicate(timeout=WAIT + SLACK + 120)
        except subprocess.TimeoutExpired:
            command.kill()
            out, _ = command.communicate()
            pytest.fail(f"`biasaudit run` still running: {out.decode()[-2000:]}")
        ended = time.monotonic()
    printed = out.decode(errors="replace")
    tail = printed[-2000:]
    assert cut_at, tail
    after_cut = ended - cut_at[0]
    print(f"exit {command.returncode} {after_cut:.1f} s after the cut")
    print(tail[-700:])
    runs = list_runs(make_engine(url))
    assert runs["status"].tolist() == ["failed"], tail  # no `running` row is left
    run_id = int(runs["id"].iloc[0])
    assert command.returncode == 1, tail
    lines = [line for line in printed.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and f"run {run_id} of 'credit-race' was NOT stored" in lines[0], tail
    assert after_cut < WAIT + SLACK, tail  # the bound stated in docs/operations.md
    leftover = subprocess.run(
        ["pgrep", "-s", str(command.pid)], capture_output=True, text=True, check=False
    )
    assert leftover.stdout.strip() == "", f"processes left: {leftover.stdout}"
    with engine.connect() as connection:
        error = connection.scalar(text("SELECT error FROM audit_runs"))
    assert "Prefect" in error, error
    assert run_audit("credit-race", str(config), url)["run_id"] != run_id  # not blocked


def test_the_probe_takes_any_http_answer_for_prefect_and_no_answer_for_silence(monkeypatch):
    """A server that answers 401 (one wanting credentials, as Prefect Cloud) is there: the
    command must not give up on it. A port that accepts and never answers is silence, counted
    from the first question it left unanswered."""
    import http.server
    import socket

    from biasaudit.flows.cli import probe

    monkeypatch.setattr(probe, "ANSWER_WITHIN", 0.5)
    monkeypatch.setattr(probe, "EVERY", 0.2)

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    mute = socket.create_server(("127.0.0.1", 0))  # listens, never reads nor answers
    try:
        there = probe.PrefectProbe(f"http://127.0.0.1:{server.server_address[1]}/api")
        silent = probe.PrefectProbe(f"http://127.0.0.1:{mute.getsockname()[1]}/api")
        time.sleep(2.0)
        assert there.silent_for() == 0.0
        assert silent.silent_for() > 1.0
        # silence counts from an unanswered question: a probe answered, then not asking (its
        # process stopped, say), is not silent however long ago the answer was
        there.stop()
        time.sleep(1.0)
        assert there.silent_for() == 0.0
        silent.stop()
    finally:
        server.shutdown()
        mute.close()
