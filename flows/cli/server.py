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
import time
import urllib.request
from pathlib import Path

from biasaudit.flows.cli.common import PREFECT_LOGS, Mistake

FIRST_RUN_NOTE = "first flow run of a process starts a local Prefect server (10-20 s)"


def _prefect_environment(logs: bool = False) -> None:
    """Point Prefect at a server: $PREFECT_API_URL or the profile's, else a temporary local server
    started here that dies with this process (even on SIGKILL), unlike Prefect's own temporary
    server. Prefect's log lines are left out unless ``logs``, --verbose or --debug: the command
    prints the run's results itself, and an error as one line. The flow runs of this process send
    no heartbeat unless the operator configured them (flows.heartbeats)."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.settings import get_current_settings

    from biasaudit.flows.heartbeats import heartbeat_updates
    from biasaudit.flows.logs import install_short_errors, quiet_prefect_console

    install_short_errors()
    if not (logs or PREFECT_LOGS["on"]):
        quiet_prefect_console()
    updates = heartbeat_updates()  # the flow runs this process runs: flows.heartbeats
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
