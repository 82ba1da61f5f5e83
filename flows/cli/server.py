"""Prefect for the commands that run flows: the configured server, or a temporary local one that
dies with this process."""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from biasaudit.flows.cli.common import PREFECT_LOGS, Mistake

T = TypeVar("T")

FIRST_RUN_NOTE = "first flow run of a process starts a local Prefect server (10-20 s)"
# Deadlines against Prefect (docs/operations.md, "When Prefect is unreachable"): each API request
# (Prefect's own setting, unless the operator set it), and how long a command waits for Prefect
# once its runs are stored before it says so and exits.
API_REQUEST_SECONDS = "20"
WAIT_ENV = "BIASAUDIT_PREFECT_WAIT_SECONDS"
WAIT_SECONDS = 60.0
_SERVERS: list[subprocess.Popen] = []  # the temporary Prefect servers this process started


def _prefect_environment(logs: bool = False) -> None:
    """Point Prefect at a server: $PREFECT_API_URL or the profile's, else a temporary local server
    started here that dies with this process (even on SIGKILL), unlike Prefect's own temporary
    server. Prefect's log lines are left out unless ``logs``, --verbose or --debug: the command
    prints the run's results itself, and an error as one line. The flow runs of this process send
    no heartbeat unless the operator configured them (flows.heartbeats)."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    request_timeout = "PREFECT_API_REQUEST_TIMEOUT" not in os.environ
    os.environ.setdefault("PREFECT_API_REQUEST_TIMEOUT", API_REQUEST_SECONDS)  # flow runs' too
    from prefect.settings import PREFECT_API_REQUEST_TIMEOUT, get_current_settings

    from biasaudit.flows.heartbeats import heartbeat_updates
    from biasaudit.flows.logs import install_short_errors, quiet_prefect_console

    install_short_errors()
    if not (logs or PREFECT_LOGS["on"]):
        quiet_prefect_console()
    updates = heartbeat_updates()  # the flow runs this process runs: flows.heartbeats
    if request_timeout:  # Prefect read its settings when imported: this process's own deadline
        updates[PREFECT_API_REQUEST_TIMEOUT] = float(API_REQUEST_SECONDS)
    if not get_current_settings().api.url:
        url = _start_temporary_server()
        from prefect.settings import PREFECT_API_URL

        os.environ["PREFECT_API_URL"] = url  # inherited by flow runs `serve` starts
        updates[PREFECT_API_URL] = url
    if updates:
        from prefect.settings import temporary_settings

        stack = contextlib.ExitStack()
        stack.enter_context(temporary_settings(updates=updates))
        atexit.register(stack.close)


# Started in the server's process before it becomes uvicorn: ask Linux to SIGKILL it when its
# parent (this CLI) dies, even by SIGKILL (PR_SET_PDEATHSIG survives exec), then exec the server.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
)


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_temporary_server() -> str:
    """Start Prefect's API server for this process only; returns its API URL."""
    import prefect
    from prefect.settings import get_current_settings

    port = _free_port()
    env = {
        **os.environ,
        **get_current_settings().to_environment_variables(exclude_unset=True),
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
    }
    log = tempfile.TemporaryFile()  # noqa: SIM115 - the server writes to it for its lifetime
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _DIE_WITH_PARENT,
            str(os.getpid()),
            "-m",
            "uvicorn",
            "--app-dir",
            str(Path(prefect.__file__).parent.parent),
            "--factory",
            "prefect.server.api.server:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "error",
            "--lifespan",
            "on",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    atexit.register(_stop, server)
    _SERVERS.append(server)
    url = f"http://127.0.0.1:{port}/api"
    timeout = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            log.seek(0)
            tail = log.read().decode(errors="replace").strip()[-300:]
            raise Mistake(f"the temporary Prefect server exited ({server.returncode}): {tail}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{url}/health", timeout=2) as response,
        ):
            if response.status == 200:
                return url
        time.sleep(0.2)
    raise Mistake(f"the temporary Prefect server did not start within {timeout:.0f} s")


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def prefect_wait() -> float:
    """How long a command waits for Prefect once its runs are stored (BIASAUDIT_PREFECT_WAIT_SECONDS,
    default 60 s)."""
    try:
        return float(os.environ.get(WAIT_ENV, WAIT_SECONDS))
    except ValueError:
        raise Mistake(f"{WAIT_ENV} is a number of seconds, not {os.environ[WAIT_ENV]!r}") from None


def bounded_flow(call: Callable[[], T], runs: int = 1) -> T:
    """``call()`` (a flow run of ``runs`` audit runs) with a deadline against Prefect: once its
    runs are stored (flows.pipeline.STORED_RUNS), the command waits at most ``prefect_wait()``
    seconds for the rest (the report, its artifacts, the flow run's final state) and for its own
    exit. Past that, it prints which runs are stored (id and version), stops the temporary
    Prefect server it started and exits 1 at once (``os._exit``: Prefect's exit handlers, which
    flush logs and events to a server that does not answer, would hold the process for many
    minutes). A flow that fails in Prefect after storing its runs is a Mistake saying so."""
    from prefect.settings import get_current_settings

    from biasaudit.flows.cli.probe import PrefectProbe, prefect_verify
    from biasaudit.flows.logs import AuditsFailed, one_line
    from biasaudit.flows.pipeline import BEGUN_RUNS, STORED_RUNS

    before, wait, done = len(STORED_RUNS), prefect_wait(), threading.Event()
    begun = len(BEGUN_RUNS)
    stored_at: list[float] = []
    api = get_current_settings().api
    probe = PrefectProbe(api.url, prefect_verify(api.tls_insecure_skip_verify, api.ssl_cert_file))

    def watch() -> None:
        while not done.wait(0.5):
            if not stored_at and len(STORED_RUNS) - before >= runs:
                stored_at.append(time.monotonic())
                probe.stop()
            if stored_at and time.monotonic() - stored_at[0] > wait:
                _exit_stored(STORED_RUNS[before:], f"Prefect did not answer within {wait:.0f} s")
            if not stored_at and probe.silent_for() > wait:
                _exit_unstored(BEGUN_RUNS[begun:], STORED_RUNS[before:], wait)

    threading.Thread(target=watch, name="biasaudit-prefect-deadline", daemon=True).start()
    try:
        return call()
    except AuditsFailed:  # audits failed (the flow says which): not Prefect
        raise
    except Exception as exc:
        stored = STORED_RUNS[before:]
        if not stored:
            raise
        raise Mistake(
            f"{_stored_runs(stored)}; then Prefect failed: {one_line(exc)} (write the report "
            f"with {_report_commands(stored)})"
        ) from None
    finally:
        done.set()
        probe.stop()
        # the exit's share of the same budget (at least 5 s) once the runs are stored
        spent = time.monotonic() - stored_at[0] if stored_at else 0.0
        _bound_exit(max(5.0, wait - spent))


def _stored_runs(stored: list[dict]) -> str:
    from biasaudit.schemas.report import run_label

    named = ", ".join(f"{run_label(r['run_id'], r['version'])} of {r['audit']!r}" for r in stored)
    return f"{named} succeeded and {'is' if len(stored) == 1 else 'are'} stored"


def _report_commands(stored: list[dict]) -> str:
    return ", ".join(f"`biasaudit report {r['run_id']}`" for r in stored)


def _bound_exit(wait: float) -> None:
    """Let this process's exit wait at most ``wait`` seconds for Prefect: its services flush logs
    and events to the API when the interpreter shuts down (threading's exit hooks, run before
    atexit, last registered first), for many minutes when the API does not answer."""

    def deadline() -> None:
        def expire() -> None:
            time.sleep(wait)
            with contextlib.suppress(Exception):
                sys.stderr.write(
                    f"error: Prefect did not take this process's last logs and events within "
                    f"{wait:.0f} s; what was printed above is stored\n"
                )
                sys.stderr.flush()
            for server in _SERVERS:
                with contextlib.suppress(Exception):
                    server.kill()
            os._exit(1)

        threading.Thread(target=expire, name="biasaudit-exit-deadline", daemon=True).start()

    if Path(sys.argv[0]).name != "biasaudit":  # a process embedding the CLI (tests) exits itself
        return
    with contextlib.suppress(Exception):  # private, as Prefect's own use of it
        threading._register_atexit(deadline)  # type: ignore[attr-defined]


def _exit_stored(stored: list[dict], why: str) -> NoReturn:
    """Say which runs are stored and why the command stops, stop this process's temporary
    Prefect servers, exit 1 now."""
    _say_error(
        f"{_stored_runs(stored)}; {why}: the command stops without its report (write it with "
        f"{_report_commands(stored)})"
    )
    _exit_now()


def _exit_unstored(begun: list[dict], stored: list[dict], wait: float) -> NoReturn:
    """Prefect has not answered for ``wait`` seconds before the runs are stored: mark each begun
    run that did not commit failed, say which runs are NOT stored (and which are), stop this
    process's temporary Prefect servers, exit 1 now."""
    from biasaudit.flows.pipeline import give_up

    why = f"the Prefect API did not answer for {wait:.0f} s"
    said = [_stored_runs(stored)] if stored else []
    for run in begun:
        run_id, audit = run["run_id"], run["record"].audit_name
        if any(s["run_id"] == run_id for s in stored):
            continue
        try:  # a run that committed meanwhile stays succeeded; one marked failed never commits
            committed = give_up(run["url"], run_id, run["record"], f"PrefectUnreachable: {why}")
            state = "succeeded and is stored" if committed else "was NOT stored"
        except Exception as exc:  # noqa: BLE001 - unmarked, its lease lapses, the next run ends it
            state = (
                f"may or may not be stored (its row could not be read: {type(exc).__name__}; "
                f"`biasaudit history` tells)"
            )
        said.append(f"run {run_id} of {audit!r} {state}")
    _say_error(
        f"{'; '.join(said) or 'no run was stored'}; {why}: the command stops (run it again once "
        "Prefect answers)"
    )
    _exit_now()


def _say_error(text: str) -> None:
    """One error line on stderr, whatever the terminal (a failure to print is no second error)."""
    from biasaudit.flows.cli.common import errors

    with contextlib.suppress(Exception):
        errors.print(f"error: {text}", soft_wrap=True, highlight=False, markup=False)


def _exit_now() -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    for server in _SERVERS:
        with contextlib.suppress(Exception):
            server.kill()
    os._exit(1)
