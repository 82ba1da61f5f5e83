"""The production path on a real Prefect server: serve, trigger on demand, find the run in history;
no password reaches Prefect; killing the CLI leaves no Prefect server behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from biasaudit.db.engine import make_engine, safe_url
from biasaudit.db.store.history import list_runs
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.migrate import upgrade
from biasaudit.flows.demo import END, GROUPS, synthetic_predictions

from .conftest import DEMO_CONFIG

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PASSWORD = "s3cret-" + uuid.uuid4().hex[:8]  # PostgreSQL here trusts any password


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, timeout: float = 5) -> dict | list | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read())
    except OSError:
        return None


def _post(url: str, body: dict) -> dict | list:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _stop(process: subprocess.Popen) -> str:
    """Kill the process group and return what it printed."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)
    out = process.stdout.read() if process.stdout else b""
    return out.decode(errors="replace")


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    """A real `prefect server start` with its own PREFECT_HOME; yields its API URL."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
        # The scheduler's loop (default 60 s) shortened through Prefect's own setting, so a
        # one-minute schedule is seen to fire within a test.
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5",
        # Likewise the clean-up that cancels the subflow runs of a cancelled run (default 20 s).
        "PREFECT_SERVER_SERVICES_CANCELLATION_CLEANUP_LOOP_SECONDS": "5",
    }
    env.pop("PREFECT_API_URL", None)
    server = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    api = f"http://127.0.0.1:{port}/api"
    deadline = time.time() + 120
    while _get(f"{api}/health", timeout=2) is not True:
        assert server.poll() is None, _stop(server)[-2000:]
        assert time.time() < deadline, "prefect server did not start in 120 s"
        time.sleep(0.5)
    yield api
    _stop(server)


def _client_env(api: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PREFECT_API_URL": api, "BIASAUDIT_LEASE_SECONDS": "10"}
    env.pop("BIASAUDIT_DATABASE_URL", None)
    return {**env, **extra}


def _serve_command(config: Path, name: str) -> list[str]:
    """`biasaudit serve` of ``config`` on the nightly schedule, as deployment ``name``."""
    return [str(BIN / "biasaudit"), "serve", "--config", str(config), "--name", name]


def _trigger(api: str, env: dict, name: str, audits: list[str]) -> subprocess.CompletedProcess:
    """`prefect deployment run 'nightly/NAME' -p audits=[...] --watch`, retried until `serve`
    has registered the deployment (bounded)."""
    deadline = time.time() + 150
    while True:
        done = subprocess.run(
            [
                str(BIN / "prefect"),
                "deployment",
                "run",
                f"nightly/{name}",
                "-p",
                f"audits={json.dumps(audits)}",
                "-p",
                f"as_of={json.dumps(END.isoformat())}",
                "--watch",
                "--watch-timeout",
                "400",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=450,
            check=False,
        )
        if done.returncode == 0 or "not found" not in (done.stdout + done.stderr).lower():
            return done
        assert time.time() < deadline, done.stdout + done.stderr
        time.sleep(2)


def _demo_database(url: str) -> None:
    upgrade(url)
    data = synthetic_predictions()
    data = data[data["model_id"] == "credit-scorer"].head(3000)
    load_predictions(make_engine(url), data, list(GROUPS), "test")


@pytest.fixture
def postgres_with_password(postgres_server_url):
    """The session's PostgreSQL database, emptied, loaded, addressed with a password."""
    from sqlalchemy.engine import make_url

    engine = make_engine(postgres_server_url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    url = make_url(postgres_server_url).set(password=PASSWORD).render_as_string(hide_password=False)
    _demo_database(url)
    return url


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["threads", "dask"])
def test_serve_and_trigger_on_a_real_server(
    prefect_server, postgres_with_password, tmp_path, runner
):
    """It serves the nightly deployment, runs a run
    triggered with `prefect deployment run -p audits=[...]` to completion, and the run appears in
    `history`; the password of the database URL reaches neither Prefect nor any output."""
    url, name = postgres_with_password, f"test-{runner}"
    env = _client_env(prefect_server, BIASAUDIT_DATABASE_URL=url)
    command = _serve_command(DEMO_CONFIG, name)
    if runner == "dask":  # the URL on the command line this time: Prefect gets a reference
        command += ["--task-runner", "dask", "--db", url]
        env = _client_env(prefect_server)
    serve = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=tmp_path,
    )
    try:
        trigger_env = _client_env(prefect_server)
        done = _trigger(prefect_server, trigger_env, name, ["credit-race"])
        assert serve.poll() is None, "serve stopped"  # it keeps serving after the run
    finally:
        served = _stop(serve)
    assert done.returncode == 0, done.stdout + done.stderr + served[-3000:]
    assert "Completed" in done.stdout
    runs = list_runs(make_engine(url))
    assert runs["audit_name"].tolist() == ["credit-race"]
    assert runs["status"].tolist() == ["succeeded"]
    with make_engine(url).connect() as connection:
        flow_run_id = connection.scalar(text("SELECT flow_run_id FROM audit_runs"))
    history = subprocess.run(
        [str(BIN / "biasaudit"), "history", "--format", "json", "--db", url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert history.returncode == 0, history.stderr
    assert [r["audit_name"] for r in json.loads(history.stdout)] == ["credit-race"]
    # What Prefect stored: the deployment's and every flow run's parameters.
    deployment = _get(f"{prefect_server}/deployments/name/nightly/{name}")
    flow_runs = _post(  # runs that started: other tests leave scheduled runs that never do
        f"{prefect_server}/flow_runs/filter",
        {"flow_runs": {"start_time": {"is_null_": False}}, "limit": 200},
    )
    stored = json.dumps([deployment, flow_runs])
    assert flow_run_id in {run["id"] for run in flow_runs}  # the audit subflow's run
    expected = "env:BIASAUDIT_DATABASE_URL" if runner == "dask" else None
    assert deployment["parameters"]["db_url"] == expected
    for where in (stored, served, done.stdout, done.stderr, history.stdout, history.stderr):
        assert PASSWORD not in where


SCHEDULED_AUDIT = """
[[audits]]
name = "credit-race"
model_id = "credit-scorer"
window = "all"
attributes = ["race", "sex"]
metrics = ["tpr", "fpr"]
"""


def _completed_scheduled_runs(api: str, deployment_id: str) -> list[dict]:
    """Flow runs of the deployment that the server's scheduler created (never a trigger) and
    that completed."""
    try:
        runs = _post(
            f"{api}/flow_runs/filter",
            {
                "flow_runs": {
                    "deployment_id": {"any_": [deployment_id]},
                    "state": {"type": {"any_": ["COMPLETED"]}},
                },
                "limit": 50,
            },
        )
    except OSError:  # a busy server: asked again on the next poll, within the deadline
        return []
    assert isinstance(runs, list)
    return [r for r in runs if r["auto_scheduled"]]


@pytest.mark.slow
def test_a_one_minute_schedule_fires_by_itself(prefect_server, tmp_path):
    """`biasaudit serve --cron '* * * * *'` on a real Prefect server: with nothing triggered, the
    server's scheduler creates a run, the served process runs it to completion and the audit run
    appears in `history`, within two minutes of the deployment being registered. (On SQLAlchemy
    2.1 the scheduler raised on every loop and no scheduled run was ever created.)"""
    url = f"sqlite:///{tmp_path / 'scheduled.db'}"
    _demo_database(url)
    config = tmp_path / "scheduled.toml"
    config.write_text(SCHEDULED_AUDIT)
    name = "every-minute"
    serve = subprocess.Popen(
        [str(BIN / "biasaudit"), "serve", "-c", str(config), "--db", url]
        + ["--cron", "* * * * *", "--name", name],
        env=_client_env(prefect_server),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=tmp_path,
    )
    try:
        deadline = time.time() + 120
        while (deployment := _get(f"{prefect_server}/deployments/name/nightly/{name}")) is None:
            assert serve.poll() is None and time.time() < deadline, "serve registered nothing"
            time.sleep(1)
        assert isinstance(deployment, dict)
        registered = time.time()
        while not (completed := _completed_scheduled_runs(prefect_server, deployment["id"])):
            assert serve.poll() is None, "serve stopped"
            assert time.time() < registered + 120, "no scheduled run completed within 2 minutes"
            time.sleep(2)
        waited = time.time() - registered
    finally:
        served = _stop(serve)
    # Stopped by SIGTERM, as a service manager stops it: quietly (Prefect's own handler printed
    # two tracebacks and "coroutine 'Runner.astop' was never awaited").
    assert "stopped serving nightly/every-minute" in served, served[-3000:]
    assert "Traceback" not in served and "ERROR" not in served, served[-3000:]
    assert "never awaited" not in served
    runs = list_runs(make_engine(url))
    assert runs["status"].tolist()[-1:] == ["succeeded"], served[-3000:]
    with make_engine(url).connect() as connection:
        first = connection.scalar(text("SELECT flow_run_id FROM audit_runs ORDER BY id LIMIT 1"))
    subflow = _get(f"{prefect_server}/flow_runs/{first}")  # the audit's own flow run ...
    assert isinstance(subflow, dict) and subflow["parent_task_run_id"]
    parent = _get(f"{prefect_server}/task_runs/{subflow['parent_task_run_id']}")
    assert isinstance(parent, dict)  # ... is a subflow of a run the scheduler created
    assert parent["flow_run_id"] in {r["id"] for r in completed}
    history = subprocess.run(
        [str(BIN / "biasaudit"), "history", "--format", "json", "--db", url],
        env=_client_env(prefect_server),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert history.returncode == 0, history.stderr
    assert "credit-race" in {r["audit_name"] for r in json.loads(history.stdout)}
    print(f"scheduled run completed {waited:.0f} s after the deployment was registered")


def _children(pid: int) -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    )
    return [int(p) for p in out.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_killing_the_cli_leaves_no_prefect_server(tmp_path):
    """It starts its temporary Prefect server so that a SIGKILL of the CLI takes the server
    with it (Prefect's own temporary server is orphaned then)."""
    url = f"sqlite:///{tmp_path / 'kill.db'}"
    _demo_database(url)
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "home")}
    env.pop("PREFECT_API_URL", None)
    cli = subprocess.Popen(
        [
            str(BIN / "biasaudit"),
            "run",
            "credit-race",
            "-c",
            str(DEMO_CONFIG),
            "--db",
            url,
            "--as-of",
            END.isoformat(),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline, servers = time.time() + 90, []
        while not servers:
            assert cli.poll() is None and time.time() < deadline
            servers = [
                p
                for p in _children(cli.pid)
                if "uvicorn" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")
            ]
            time.sleep(0.2)
        (server,) = servers
        cli.send_signal(signal.SIGKILL)
        cli.wait(timeout=10)
        deadline = time.time() + 15
        while _alive(server) and time.time() < deadline:
            time.sleep(0.2)
        assert not _alive(server), "the temporary Prefect server outlived the killed CLI"
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
        for pid in _children(cli.pid):
            os.kill(pid, signal.SIGKILL)


PREFECT_LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| [A-Z]+ +\| ")


@pytest.mark.slow
def test_a_handled_error_gives_short_logs_and_one_error_line(prefect_server, tmp_path):
    """`biasaudit run` prints only its own output: the run, its flagged findings and the report,
    and a failure as the one line `error: ...` with exit 1. Prefect's log lines show with
    --verbose (about a handled error: one line each, no traceback), tracebacks with --debug."""
    url = f"sqlite:///{tmp_path / 'short.db'}"
    _demo_database(url)
    env = _client_env(prefect_server)
    args = [str(BIN / "biasaudit"), "run", "credit-race", "-c", str(DEMO_CONFIG), "--db", url]
    short = subprocess.run(
        [*args, "--as-of", "2001-01-01"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = short.stdout + short.stderr
    assert short.returncode == 1, output
    assert output.startswith("error: ") and len(output.splitlines()) == 1, output
    assert "no predictions of model 'credit-scorer'" in output
    # An empty window (and labels spelt yes/no) now fail before any server starts
    # (flows/cli/runs.py); scores outside [0, 1] fail inside the flow run, where Prefect logs the
    # handled error.
    with make_engine(url).begin() as connection:
        connection.execute(
            text(
                "CREATE VIEW yesno AS SELECT prediction_id, model_id, predicted_at, y_true, "
                "y_pred, 5.0 AS score, attributes FROM predictions"
            )
        )
    yesno = tmp_path / "yesno.toml"
    yesno.write_text(
        '[[audits]]\nname = "yn"\nmodel = "credit-scorer"\nsource = "yesno"\nwindow = "all"\n'
        'attributes = ["race"]\n'
    )
    verbose = subprocess.run(
        [args[0], "--verbose", "run", "yn", "-c", str(yesno), "--db", url],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = verbose.stdout + verbose.stderr
    assert verbose.returncode == 1 and "Traceback" not in output, output
    logged = [line for line in output.splitlines() if PREFECT_LOG_LINE.match(line)]
    assert any("NoValidRows: run " in line for line in logged), output
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, output
    debug = subprocess.run(
        [args[0], "--debug", *args[1:], "--as-of", "2001-01-01"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert debug.returncode != 0 and "Traceback" in debug.stdout + debug.stderr
    ok = subprocess.run(
        [*args, "--as-of", END.isoformat()],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ok.returncode == 0 and ok.stderr == "", ok.stdout + ok.stderr
    assert not [line for line in ok.stdout.splitlines() if PREFECT_LOG_LINE.match(line)]
    # run 2: the failed run 1 is the out-of-range scores'; the empty windows failed before any run
    assert "audit runs" in ok.stdout and "run 2 (v1) of credit-race: flagged" in ok.stdout
    report = Path(ok.stdout.split("report: ")[1].split()[0])
    assert report.exists()


@pytest.mark.slow
def test_a_reference_group_typo_is_one_line_naming_the_groups(prefect_server, tmp_path):
    """It fails `biasaudit run` of an audit whose reference group is not in the data with one
    `error:` line that lists the groups there are, the largest first, and nothing else about it
    (Prefect's log lines stay off the terminal), with no traceback."""
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    _demo_database(url)
    data = synthetic_predictions()
    sizes = data[data["model_id"] == "credit-scorer"].head(3000)["race"].value_counts()
    assert sizes.is_unique  # the largest-first order below is unambiguous
    config = tmp_path / "typo.toml"
    config.write_text(
        '[[audits]]\nname = "a"\nmodel = "credit-scorer"\nattributes = ["race"]\n'
        'reference_groups = { race = "Whte" }\n'
    )
    done = subprocess.run(
        [str(BIN / "biasaudit"), "run", "a", "-c", str(config), "--db", url],
        env=_client_env(prefect_server),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output and len(output.splitlines()) < 15, output
    message = (
        "reference group 'Whte' of attribute 'race' is not in the data (audit 'a'); groups: "
        + ", ".join(repr(g) for g in sizes.index)
    )
    assert [line for line in output.splitlines() if line.startswith("error: ")] == [
        f"error: {message}"
    ], output
    # Prefect's own lines stay off the terminal (--verbose shows them, one line each for a handled
    # error: test_a_handled_error_gives_short_logs_and_one_error_line).
    assert [line for line in output.splitlines() if "Whte" in line] == [f"error: {message}"]


ENDED = {"CANCELLED", "CRASHED", "FAILED"}


@pytest.mark.slow
def test_sigterm_mid_run_ends_the_flow_runs_on_the_server(
    prefect_server, postgres_server_url, tmp_path
):
    """`biasaudit serve` stopped by SIGTERM while an audit runs: serve cancels the in-flight flow
    run through Prefect (its process ended, its state Cancelled), the server then cancels the
    audit's subflow run, and serve stops quietly; no flow run is left Running."""
    engine = make_engine(postgres_server_url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    _demo_database(postgres_server_url)
    with engine.begin() as connection:  # 20 ms a row: a minute for the scan
        connection.execute(
            text(
                "CREATE VIEW slow_predictions AS SELECT p.* FROM predictions p "
                "WHERE length(p.prediction_id || pg_sleep(0.02)::text) > 0"
            )
        )
    config = tmp_path / "slow.toml"
    config.write_text(SCHEDULED_AUDIT + 'source = "slow_predictions"\n')
    name, env = "sigterm", _client_env(prefect_server)
    began = datetime.now(UTC)  # the server is the session's: its earlier flow runs are not ours
    serve = subprocess.Popen(
        [str(BIN / "biasaudit"), "serve", "-c", str(config), "--db", postgres_server_url]
        + ["--name", name],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=tmp_path,
    )
    try:
        deadline = time.time() + 150
        command = [str(BIN / "prefect"), "deployment", "run", f"nightly/{name}"]
        while (
            run := subprocess.run(command, env=env, capture_output=True, check=False)
        ).returncode:
            assert time.time() < deadline, run.stdout + run.stderr  # until serve registered it
            time.sleep(2)
        while list_runs(engine).empty:  # the audit has begun its scan
            assert serve.poll() is None and time.time() < deadline, "no audit began"
            time.sleep(0.5)
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=90)  # Prefect gives a cancelled run's process 30 s to end
    finally:
        served = _stop(serve)
    assert "stopped serving nightly/sigterm" in served, served[-3000:]
    assert "Traceback" not in served, served[-3000:]
    deadline = time.time() + 60
    while True:  # the server's cancellation clean-up reaches the subflow within its loop
        ours = _post(  # the schedules' future runs are not ours (nor, past `limit`, seen)
            f"{prefect_server}/flow_runs/filter",
            {
                "flow_runs": {
                    "start_time": {"after_": began.isoformat()},
                    "state": {"type": {"not_any_": ["SCHEDULED"]}},
                },
                "limit": 50,
            },
        )
        states = {r["name"]: r["state_type"] for r in ours}
        if set(states.values()) <= ENDED or time.time() > deadline:
            break
        time.sleep(2)
    assert len(states) == 2 and "audit-credit-race" in states, states
    # the nightly run is cancelled; its audit subflow ends too (cancelled, crashed, or failed
    # when the cancellation interrupted its work first): none is left running
    nightly = next(state for flow, state in states.items() if flow != "audit-credit-race")
    assert nightly in {"CANCELLED", "CRASHED"}, states
    assert states["audit-credit-race"] in ENDED, states


# ---- a lock on the results the run compares itself with --------------------------------------


@pytest.fixture
def audited_once(tmp_path):
    """A private PostgreSQL store with the demo's credit-scorer predictions, audited once (run 1)
    as of a day before the end: the next run compares itself with run 1's stored results."""
    from datetime import timedelta

    from biasaudit.flows.pipeline import run_audit

    from .conftest import separate_database

    with separate_database("postgresql", tmp_path) as url:
        _demo_database(url)
        run_audit("credit-race", str(DEMO_CONFIG), url, END - timedelta(days=1))
        yield url


def _run_beside_a_lock(api: str, url: str, folder: Path, release_after_attempts: int | None):
    """`biasaudit run` of credit-race as of END (forced, so it reads run 1's results to compare)
    while another connection holds an ACCESS EXCLUSIVE lock on metric_results, released once
    ``release_after_attempts`` of the run's reads have timed out waiting for it (never: None).
    Returns the finished process and how many waits of the run's sessions on it were seen."""
    environment = _client_env(
        api,
        BIASAUDIT_STATEMENT_TIMEOUT_SECONDS="1",
        BIASAUDIT_RETRY_BASE_SECONDS="1",
        BIASAUDIT_REPORTS_DIR=str(folder / "reports"),
    )
    waiting = text(
        "SELECT a.pid, a.query_start, a.query FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
        "WHERE NOT l.granted AND l.relation = 'metric_results'::regclass"
    )
    holder, watcher = make_engine(url), make_engine(url)
    seen: dict[tuple, str] = {}
    with holder.connect() as lock, watcher.connect() as watch:
        lock.execute(text("LOCK TABLE metric_results IN ACCESS EXCLUSIVE MODE"))
        cli = subprocess.Popen(
            [str(BIN / "biasaudit"), "run", "credit-race", "-c", str(DEMO_CONFIG), "--db", url]
            + ["--as-of", END.isoformat(), "--force"],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        deadline = time.time() + 240
        while cli.poll() is None and time.time() < deadline:
            waits = {(r.pid, r.query_start): r.query for r in watch.execute(waiting)}
            ended = set(seen) - set(waits)  # a wait that is over: that attempt timed out
            seen.update(waits)
            if release_after_attempts is not None and len(ended) >= release_after_attempts:
                lock.rollback()  # releases the lock; the next attempt reads
                release_after_attempts = None
            time.sleep(0.05)
            watch.rollback()  # a fresh snapshot of pg_stat_activity next time
        lock.rollback()
    holder.dispose()
    watcher.dispose()
    if cli.poll() is None:
        os.killpg(cli.pid, signal.SIGKILL)
    cli.wait()
    return cli.returncode, cli.stdout.read() if cli.stdout else "", seen


def _rows_of_run(url: str, run_id: int) -> dict[str, int]:
    with make_engine(url).connect() as connection:
        return {
            table: connection.scalar(text(f"SELECT count(*) FROM {table} WHERE run_id = {run_id}"))
            for table in ("group_counts", "metric_results", "comparison_results")
        }


@pytest.mark.slow
def test_a_lock_released_within_the_retries_lets_the_run_finish(
    prefect_server, audited_once, tmp_path
):
    """It retries reading the previous run's results when another session's lock on
    metric_results makes the read time out (BIASAUDIT_STATEMENT_TIMEOUT_SECONDS), and the run
    completes, compared with run 1, once the lock is released."""
    code, output, waits = _run_beside_a_lock(prefect_server, audited_once, tmp_path, 1)
    assert code == 0, output
    # the first read waited on the lock until its timeout (the lock was released after that)
    assert waits and all("metric_results" in q for q in waits.values()), waits
    runs = list_runs(make_engine(audited_once)).sort_values("id")
    assert runs["status"].tolist() == ["succeeded", "succeeded"], runs
    stored = _rows_of_run(audited_once, int(runs["id"].max()))
    assert all(stored.values()), stored  # its comparison with run 1 included


@pytest.mark.slow
def test_a_lock_held_throughout_ends_the_run_in_one_line(prefect_server, audited_once, tmp_path):
    """It tries the read once and retries it RETRIES times while the lock is held throughout,
    then fails with one line (what, where, what to do; no SQL, no traceback), exit code 1, the
    run recorded as failed with that line and none of its results kept."""
    from biasaudit.db.retry import RETRIES

    code, output, waits = _run_beside_a_lock(prefect_server, audited_once, tmp_path, None)
    assert code == 1, output
    assert len(waits) == 1 + RETRIES, waits
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    (line,) = lines
    shown = safe_url(audited_once)
    assert f"reading the previous run's results (for comparison) on {shown} failed" in line
    assert "statement timeout" in line and "BIASAUDIT_STATEMENT_TIMEOUT_SECONDS (1 s)" in line
    assert "SELECT" not in line and "Traceback" not in output and len(line) < 500, line
    runs = list_runs(make_engine(audited_once)).sort_values("id")
    assert runs["status"].tolist() == ["succeeded", "failed"], runs
    with make_engine(audited_once).connect() as connection:
        error = connection.scalar(text("SELECT error FROM audit_runs WHERE status = 'failed'"))
    assert error == "StepFailed: " + line.removeprefix("error: ")
    assert set(_rows_of_run(audited_once, int(runs["id"].max())).values()) == {0}
