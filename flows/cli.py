"""The ``biasaudit`` command line.

Commands that do not run a flow (history, load, db, audits, quarantine) never import Prefect, so
they start fast. Every mistake an operator can make prints one line ``error: ...`` and exits with
a non-zero code; ``--debug`` shows the traceback instead (README, "Mistakes and their messages").
Data is printed as plain text, never as terminal markup, and a database password never reaches
the output (``db.engine.safe_url``) nor Prefect (``db.engine.flow_url``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, overload

import click
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from biasaudit.schemas.names import printable
from biasaudit.schemas.urls import redact

DEBUG = {"on": False}
# Prefect's own log lines (task states, run URLs, the flow's printed lines) on the console:
# on with --verbose or --debug, and always for `serve`, whose console is the worker's log.
PREFECT_LOGS = {"on": False}


class ClearErrorsTyper(typer.Typer):
    """A Typer whose commands turn every exception into one clear line and an exit code."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
        register = super().command(*args, **kwargs)

        def decorator(function: Callable[..., Any]) -> Any:
            return register(_clear_errors(function))

        return decorator


app = ClearErrorsTyper(
    help="Versioned fairness audits of deployed binary classifiers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
db_app = ClearErrorsTyper(
    help="Database administration.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(db_app, name="db")
# Piped output (logs, CI) gets a wide table instead of rich's default 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160, highlight=False)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else 400, highlight=False)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="URL",
        help="Database URL (default: $BIASAUDIT_DATABASE_URL or sqlite:///biasaudit.db)",
    ),
]
ConfigOption = Annotated[
    str | None,
    typer.Option(
        "--config",
        "-c",
        metavar="FILE",
        help="Audit configuration (default: $BIASAUDIT_CONFIG or biasaudit.toml)",
    ),
]
FormatOption = Annotated[str, typer.Option("--format", metavar="FORMAT", help="table, csv or json")]
DEMO_CONFIG = Path(__file__).parent / "demo_audits.toml"
FIRST_RUN_NOTE = "first flow run of a process starts a local Prefect server (10-20 s)"


def _say(message: str, style: str | None = None) -> None:
    """Print ``message`` as is: never interpreted as markup, passwords redacted, control and
    bidirectional characters of the data shown as escapes (line breaks kept)."""
    shown = "\n".join(printable(line) for line in redact(message).split("\n"))
    console.print(Text(shown, style=style or ""), soft_wrap=True)


class Mistake(Exception):
    """An operator's mistake: its message is the whole story."""


def _fail(message: str, code: int = 1) -> NoReturn:
    errors.print(
        Text("error: ", style="bold red") + Text(printable(redact(message))), soft_wrap=True
    )
    raise typer.Exit(code=code)


def _message(error: BaseException) -> str:
    """One line for ``error``: handled errors by their message, others by type and message."""
    from sqlalchemy.exc import OperationalError

    from biasaudit.flows.logs import handled_errors, one_line
    from biasaudit.schemas.config import ConfigError

    if isinstance(error, (Mistake, ConfigError)):  # several problems: one line, joined
        return " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    if isinstance(error, OperationalError):
        return f"the database did not answer: {one_line(error, with_type=False)}"
    if isinstance(error, handled_errors()):
        return one_line(error, with_type=False)
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {'; '.join(lines)} (--debug shows the traceback)"


def _clear_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command; an exception becomes ``error: ...`` and exit code 1 (no traceback unless
    --debug); Ctrl-C exits 130."""

    @functools.wraps(function)
    def command(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except (typer.Exit, typer.Abort, click.exceptions.ClickException):
            raise
        except KeyboardInterrupt:
            if DEBUG["on"]:
                raise
            _fail("interrupted", code=130)
        except Exception as exc:
            if DEBUG["on"]:
                raise
            _fail(_message(exc)[:2000])

    return command


def _version() -> str:
    from importlib.metadata import version

    return version("biasaudit")


def _print_version(value: bool) -> None:
    if value:
        _say(f"biasaudit {_version()}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks and Prefect's full logs")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", help="Show Prefect's logs of flow runs (run, demo, backfill)"),
    ] = False,
) -> None:
    """Versioned fairness audits of deployed binary classifiers."""
    DEBUG["on"] = debug
    PREFECT_LOGS["on"] = verbose or debug
    if debug:
        os.environ["BIASAUDIT_DEBUG"] = "1"


def _engine(db: str | None, *, migrated: bool = True) -> Any:
    """An engine for an existing, reachable database (migrated to the head, unless not asked):
    a missing SQLite file is never created here, and every failure is one clear line."""
    from sqlalchemy.exc import OperationalError

    from biasaudit.db.engine import database_url, make_engine, safe_url

    engine = make_engine(db, create=False)
    shown = safe_url(database_url(db))
    try:
        with engine.connect() as connection:
            if migrated:
                from alembic.migration import MigrationContext
                from alembic.script import ScriptDirectory

                from biasaudit.db.migrate import alembic_config

                current = MigrationContext.configure(connection).get_current_revision()
                head = ScriptDirectory.from_config(alembic_config(db)).get_current_head()
                if current != head:
                    state = "not migrated" if current is None else f"at revision {current}"
                    raise Mistake(
                        f"database {shown} is {state} (head is {head}): run "
                        f"`biasaudit db upgrade --db URL` first"
                    )
    except OperationalError as exc:
        from biasaudit.flows.logs import one_line

        raise Mistake(
            f"cannot connect to database {shown}: {one_line(exc, with_type=False)}"
        ) from None
    return engine


def _prefect_environment(logs: bool = False) -> None:
    """Point Prefect at a server: $PREFECT_API_URL or the profile's, else a temporary local server
    started here that dies with this process (even on SIGKILL), unlike Prefect's own temporary
    server. Prefect's log lines are left out unless ``logs``, --verbose or --debug: the command
    prints the run's results itself, and an error as one line."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.settings import get_current_settings

    from biasaudit.flows.logs import install_short_errors, quiet_prefect_console

    install_short_errors()
    if not (logs or PREFECT_LOGS["on"]):
        quiet_prefect_console()
    if get_current_settings().api.url:
        return
    url = _start_temporary_server()
    from prefect.settings import PREFECT_API_URL, temporary_settings

    os.environ["PREFECT_API_URL"] = url  # inherited by flow runs `serve` starts
    stack = contextlib.ExitStack()
    stack.enter_context(temporary_settings(updates={PREFECT_API_URL: url}))
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


@overload
def _date(value: str, option: str = ...) -> datetime: ...
@overload
def _date(value: None, option: str = ...) -> None: ...
@overload
def _date(value: str | None, option: str = ...) -> datetime | None: ...
def _date(value: str | None, option: str = "--as-of") -> datetime | None:
    """The moment ``value`` names (UTC when it has no zone), or a Mistake naming ``option``."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise Mistake(
            f"{option}: {value!r} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS], UTC)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _metric(name: str) -> str:
    from biasaudit.schemas.metric_ids import canonical_metric

    try:
        return canonical_metric(name)
    except ValueError as exc:
        raise Mistake(str(exc)) from None


def _run_or_fail(engine: Any, run_id: int) -> Any:
    """The stored run, or a clear error if there is none."""
    from biasaudit.db.history import get_run

    run = get_run(engine, run_id)
    if run is None:
        _fail(f"no run with id {run_id}")
    return run


def _cell(value: Any) -> Text:
    import pandas as pd

    if value is None or (not isinstance(value, (list, dict, str)) and pd.isna(value)):
        return Text("")
    return Text(f"{value:.4g}" if isinstance(value, float) else printable(str(value)))


def _print_frame(frame: Any, title: str | None = None) -> None:
    table = Table(title=Text(printable(title)) if title else None, show_lines=False)
    for column in frame.columns:
        table.add_column(Text(printable(str(column))), overflow="fold")
    # Plain tuples: the columns may be group names, which need not be distinct identifiers
    # (NFC and NFD "José" are two groups but one Python identifier).
    for row in frame.itertuples(index=False, name=None):
        table.add_row(*[_cell(v) for v in row])
    console.print(table)


def _print_glossary(metrics: Any) -> None:
    """Each metric among ``metrics`` in words with its formula, in catalogue order."""
    from biasaudit.schemas.metric_ids import METRIC_IDS, N_MEANS, describe

    shown = [m for m in METRIC_IDS if m in set(metrics)]
    if shown:
        _say(f"metrics ({N_MEANS}):")
        for metric in shown:
            _say(f"  {describe(metric)}")


def _check_format(format_: str) -> None:
    if format_ not in ("table", "csv", "json"):
        _fail(f"--format is table, csv or json, not {format_!r}")


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Create or upgrade the database schema with the Alembic migrations."""
    from sqlalchemy.exc import OperationalError

    from biasaudit.db.engine import database_url, make_engine, safe_url
    from biasaudit.db.migrate import upgrade

    make_engine(db).dispose()  # a malformed URL or unknown dialect: one clear line
    try:
        upgrade(db)
    except OperationalError as exc:
        from biasaudit.flows.logs import one_line

        raise Mistake(
            f"cannot upgrade database {safe_url(database_url(db))}: "
            f"{one_line(exc, with_type=False)}"
        ) from None
    _say(f"database at {safe_url(database_url(db))} is up to date")


def _read_table(path: Path) -> Any:
    """A CSV or Parquet file as a frame; empty, ragged or undecodable files are one clear line."""
    import pandas as pd
    import pyarrow as pa

    if not path.exists():
        raise Mistake(f"{path} does not exist")
    if path.is_dir():
        raise Mistake(f"{path} is a directory, not a CSV or Parquet file")
    parquet = path.suffix.lower() in {".parquet", ".pq"}
    try:
        frame = pd.read_parquet(path) if parquet else pd.read_csv(path, encoding="utf-8")
    except pd.errors.EmptyDataError:
        raise Mistake(f"{path} is empty") from None
    except pd.errors.ParserError as exc:
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else "malformed"
        raise Mistake(f"{path} is not a well-formed CSV (ragged rows?): {detail}") from None
    except UnicodeDecodeError as exc:
        raise Mistake(f"{path} is not UTF-8 text (byte {exc.start})") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        kind = "Parquet" if parquet else "CSV"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Mistake(f"{path} is not a readable {kind} file: {first}") from None
    if frame.empty:
        raise Mistake(f"{path} has no rows")
    return frame


@app.command()
def load(
    path: Annotated[
        Path, typer.Argument(metavar="FILE", help="CSV or Parquet file of predictions")
    ],
    attribute: Annotated[
        list[str],
        typer.Option(
            "--attribute", "-a", metavar="COLUMN", help="Sensitive attribute column (repeat)"
        ),
    ],
    model: Annotated[
        str | None, typer.Option(metavar="ID", help="Model id, if the file has no model_id column")
    ] = None,
    model_version: Annotated[
        str | None, typer.Option(metavar="VERSION", help="Model version, if the file has none")
    ] = None,
    map_: Annotated[
        list[str] | None,
        typer.Option("--map", metavar="CANONICAL=COLUMN", help="e.g. y_true=label (repeat)"),
    ] = None,
    max_invalid_fraction: Annotated[
        float,
        typer.Option(
            metavar="SHARE",
            help="Exit with code 2 when more than this share of rows is quarantined",
        ),
    ] = 0.05,
    db: DbOption = None,
) -> None:
    """Load predictions into the predictions table, validated: invalid rows are quarantined."""
    from rich.progress import Progress

    from biasaudit.db.load import load_predictions, read_predictions_file

    if not 0.0 <= max_invalid_fraction <= 1.0:
        raise Mistake(f"--max-invalid-fraction must be between 0 and 1, not {max_invalid_fraction}")
    engine = _engine(db)
    if path.suffix.lower() in {".parquet", ".pq"}:
        frame, ragged = _read_table(path), None
    else:  # every CSV field as the text it is; ragged lines quarantined, not fatal
        if not path.exists():
            raise Mistake(f"{path} does not exist")
        if path.is_dir():
            raise Mistake(f"{path} is a directory, not a CSV or Parquet file")
        if path.stat().st_size == 0:
            raise Mistake(f"{path} is empty")
        try:
            frame, ragged = read_predictions_file(path)
        except UnicodeDecodeError as exc:
            raise Mistake(f"{path} is not UTF-8 text (byte {exc.start})") from None
        if frame.empty and ragged.empty:
            raise Mistake(f"{path} has no rows")
    try:
        mapping = dict(item.split("=", 1) for item in map_ or [])
    except ValueError:
        _fail("--map takes canonical=column")
    frame = frame.rename(columns={column: canonical for canonical, column in mapping.items()})
    if model:
        frame["model_id"] = model
    if model_version:
        frame["model_version"] = model_version
    needed = [
        "prediction_id",
        "model_id",
        "model_version",
        "predicted_at",
        "y_true",
        "y_pred",
        *attribute,
    ]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        _fail(f"{path}: missing columns {missing} (use --map, --model, --model-version)")
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task(f"loading {path.name}", total=len(frame))
        report = load_predictions(
            engine, frame, attribute, str(path), lambda n: progress.advance(bar, n), ragged
        )
    differing = ""
    if report.differing:
        *others, last = report.differing_columns
        columns = f"{', '.join(others)} or {last}" if others else last
        differing = f" ({report.differing} with a different {columns}: the stored values kept)"
    _say(
        f"read {report.read}, inserted {report.inserted}, already present {report.already_present}"
        f"{differing}, quarantined {report.quarantined}, labels updated {report.labels_updated}"
    )
    share = report.quarantined / report.read if report.read else 0.0
    if share > max_invalid_fraction:
        _fail(
            f"{report.quarantined} of {report.read} rows ({share:.1%}) were quarantined, more than "
            f"--max-invalid-fraction {max_invalid_fraction:.1%}: see `biasaudit quarantine --load`",
            code=2,
        )


@app.command()
def run(
    audit: Annotated[
        str, typer.Argument(metavar="AUDIT", help="Name of the audit in the configuration")
    ],
    config: ConfigOption = None,
    db: DbOption = None,
    as_of: Annotated[
        str | None, typer.Option(metavar="DATE", help="Audit as of this date/time (ISO, UTC)")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Write a new version even if input is unchanged")
    ] = False,
) -> None:
    """Run one audit now (one Prefect flow run); prints the run, its flagged findings and the
    report's path."""
    from biasaudit.db.engine import flow_url
    from biasaudit.schemas.config import default_config_path, load_audit

    moment = _date(as_of)
    load_audit(Path(config or default_config_path()), audit)  # a mistake fails before Prefect
    _engine(db).dispose()
    _prefect_environment()
    from biasaudit.flows.audit import audit_flow

    with console.status(f"auditing {audit} ({FIRST_RUN_NOTE})"):
        result = audit_flow(audit, config, flow_url(db), moment, force)
    _print_runs(db, [result["run_id"]])
    _print_flagged(db, [result["run_id"]])
    _check_reports([result])
    _say(f"report: {result['report']}")


def _check_reports(results: list[dict]) -> None:
    """One error line when a run's report was not written (its reason was a Prefect log line,
    hidden without --verbose): the runs are stored, the pages are not."""
    missing = [r for r in results if r["report"] is None]
    if len(missing) == 1:
        (run,) = missing
        raise Mistake(
            f"run {run['run_id']} succeeded and is stored, but its report was not written "
            f"({run['report_error']}); write it with `biasaudit report {run['run_id']}`"
        )
    if missing:
        runs = ", ".join(str(r["run_id"]) for r in missing)
        raise Mistake(
            f"runs {runs} succeeded and are stored, but their reports were not written (first: "
            f"{missing[0]['report_error']}); write each with `biasaudit report RUN`"
        )


@app.command()
def demo(db: DbOption = None) -> None:
    """Create the database, load synthetic predictions, run every demo audit, print a summary."""
    from biasaudit.db.engine import flow_url, make_engine
    from biasaudit.db.load import load_predictions
    from biasaudit.db.migrate import upgrade
    from biasaudit.flows.demo import END, GROUPS, synthetic_predictions

    make_engine(db).dispose()
    upgrade(db)
    config = Path("biasaudit.toml")
    if not config.exists():
        shutil.copyfile(DEMO_CONFIG, config)
        _say(f"wrote {config} (the demo audits; edit it to audit your own models)")
    with console.status("generating and loading synthetic predictions"):
        report = load_predictions(_engine(db), synthetic_predictions(), list(GROUPS), "demo")
    _say(
        f"synthetic predictions: inserted {report.inserted}, already present {report.already_present}"
    )
    _prefect_environment()
    from biasaudit.flows.nightly import nightly_flow

    with console.status(f"running the demo audits ({FIRST_RUN_NOTE})"):
        results = nightly_flow(str(DEMO_CONFIG), flow_url(db), END)
    _print_runs(db, [r["run_id"] for r in results])
    _print_flagged(db, [r["run_id"] for r in results])
    _check_reports(results)
    _say("next: biasaudit history, biasaudit history RUN_ID")


RUN_TABLE = {
    "id": "run",
    "audit_name": "audit",
    "model_id": "model",
    "version": "version",
    "status": "status",
    "as_of": "as of",
    "rows_read": "read",
    "rows_valid": "valid",
    "rows_quarantined": "quarantined",
}


def _print_runs(db: str | None, run_ids: list[int] | None = None, runs: Any = None) -> None:
    from biasaudit.db.history import list_runs

    if runs is None:
        runs = list_runs(_engine(db))
        runs = runs[runs["id"].isin(run_ids)]
    runs = runs.assign(as_of=runs["as_of"].astype(str).str[:16])
    _print_frame(runs[list(RUN_TABLE)].rename(columns=RUN_TABLE), title="audit runs")


def _print_flagged(db: str | None, run_ids: list[int]) -> None:
    """Per run, the disparities detection flagged (BH-adjusted p below alpha)."""
    from biasaudit.db.history import FLAGGED_COLUMNS, flagged_detections, run_results
    from biasaudit.db.models import DetectionResult
    from biasaudit.schemas.report import run_label

    engine = _engine(db)
    for run_id in run_ids:
        run = _run_or_fail(engine, run_id)
        flagged = flagged_detections(run_results(engine, DetectionResult, run_id))
        title = f"{run_label(run_id, run.version)} of {run.audit_name}: flagged disparities"
        if flagged.empty:
            _say(f"{title}: none")
        else:
            _print_frame(flagged[FLAGGED_COLUMNS], title=title)
            _print_glossary(flagged["metric"])


@app.command()
def history(
    run_id: Annotated[
        int | None, typer.Argument(metavar="[RUN]", help="Show (or export) this run's results")
    ] = None,
    audit: Annotated[str | None, typer.Option(metavar="NAME", help="Filter by audit name")] = None,
    model: Annotated[str | None, typer.Option(metavar="ID", help="Filter by model id")] = None,
    status: Annotated[
        str | None, typer.Option(metavar="STATUS", help="succeeded, failed or running")
    ] = None,
    since: Annotated[
        str | None, typer.Option(metavar="DATE", help="as_of on or after (ISO date)")
    ] = None,
    until: Annotated[
        str | None, typer.Option(metavar="DATE", help="as_of on or before (ISO date)")
    ] = None,
    attribute: Annotated[str | None, typer.Option(metavar="NAME", help="One attribute")] = None,
    group: Annotated[
        str | None, typer.Option(metavar="GROUP", help="One group (with --metric)")
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(metavar="METRIC", help="With RUN: one metric; alone: its time series"),
    ] = None,
    format_: FormatOption = "table",
    monitor: Annotated[
        bool, typer.Option("--monitor", help="Monitored runs: trajectory per comparison")
    ] = False,
    show_all: Annotated[
        bool,
        typer.Option(
            "--all", help="With RUN: after its summary, every table (metrics, MATCH, planning, ...)"
        ),
    ] = False,
    db: DbOption = None,
) -> None:
    """List stored runs, show one run (its summary; every table with --all, --attribute or
    --metric) or export its metrics, or print a metric's time series."""
    from biasaudit.db.history import list_runs, run_match, run_metrics
    from biasaudit.schemas.metric_ids import BASE_RATES
    from biasaudit.schemas.report import run_label

    _check_format(format_)
    if status is not None and status not in ("succeeded", "failed", "running"):
        raise Mistake(f"--status is succeeded, failed or running, not {status!r}")
    first, last = _date(since, "--since"), _date(until, "--until")
    metric = _metric(metric) if metric is not None else None
    engine = _engine(db)
    if monitor:
        from biasaudit.db.monitor import monitor_trajectory

        trajectory = monitor_trajectory(engine, audit, model, attribute, group, None, metric)
        if format_ != "table":
            _emit(trajectory, format_)
        elif trajectory.empty:
            console.print("no monitored runs match")
        else:
            _print_frame(trajectory, title="monitor: e-process and confidence sequence per run")
        return
    if run_id is None and metric is not None:
        _print_series(engine, metric, attribute, group, audit, model, first, last, format_)
        return
    if run_id is None:
        runs = list_runs(engine, audit, model, status, first, last)
        if format_ != "table":
            _emit(runs, format_)
            return
        if runs.empty:
            _say("no runs match")
            return
        _print_runs(db, runs=runs)
        failed = runs[runs["error"].notna()]
        for row in failed.itertuples():
            _say(f"run {row.id} failed: {row.error}", style="red")
        return
    run = _run_or_fail(engine, run_id)
    metrics = run_metrics(engine, run_id, attribute, metric)
    if format_ != "table":
        _emit(
            metrics.assign(run_id=run_id, audit_name=run.audit_name, version=run.version), format_
        )
        return
    _print_summary(engine, run)
    if not (show_all or attribute or metric):
        _say(
            "more: --all (base rates and metrics per group, undefined metrics, MATCH, planning, "
            "detection, meta-metrics); --attribute A, --metric M (the same, narrowed); "
            "--format csv|json (every metric)"
        )
        return
    if metrics.empty:
        return
    wide = metrics.pivot(
        index=["attribute", "group_name", "n"], columns="metric", values="value"
    ).reset_index()
    context = [m for m in BASE_RATES if m in wide.columns]
    if context:
        _print_frame(
            wide[["attribute", "group_name", "n", *context]],
            title=f"{run_label(run.id, run.version)}: base rates per group (context, not tested)",
        )
    _print_frame(
        wide.drop(columns=context),
        title=f"{run_label(run.id, run.version)}: metrics per group (blank = undefined)",
    )
    undefined = metrics[metrics["undefined_reason"].notna()]
    if not undefined.empty:
        _print_frame(
            undefined[["attribute", "group_name", "metric", "undefined_reason"]],
            title="undefined metrics",
        )
    alpha = run.config["thresholds"]["alpha"]
    match = run_match(engine, run_id, below=alpha)
    if not match.empty:
        title = f"MATCH tests with p < {alpha} (unadjusted): percentile of the group under its reference"
        _print_frame(match, title=title)
    _print_stage_tables(engine, run_id, attribute, metric)
    _print_glossary(metrics["metric"])


def _print_summary(engine: Any, run: Any) -> None:
    """One run at a glance, as its report's first screen (tasks.report): the run, per attribute
    its verdict and group sizes, the flagged findings, and what was not tested and why."""
    import pandas as pd

    from biasaudit.db.report_data import report_frames
    from biasaudit.schemas.report import run_label
    from biasaudit.tasks import report as first_screen

    label = run_label(run.id, run.version)
    _say(
        f"{label}: audit {run.audit_name}, model {run.model_id}"
        + (f", model version {run.model_version}" if run.model_version else "")
        + f", {run.status}; as of {run.as_of:%Y-%m-%d %H:%M}, window "
        f"({run.window_start or '-inf'}, {run.window_end}]; rows read {run.rows_read}, valid "
        f"{run.rows_valid}, quarantined {run.rows_quarantined}, unlabelled {run.rows_unlabelled}"
    )
    if run.error:
        _say(f"error: {run.error}", style="red")
    frames = report_frames(engine, run.id, trend_limit=1)
    if frames.counts.empty:
        return
    minimum = first_screen.thresholds(frames)["min_group_size"]
    sizes = first_screen.groups(frames)
    verdicts = first_screen.verdicts(frames)
    rows = [
        {
            "attribute": row.attribute,
            "verdict": first_screen.VERDICTS[row.verdict][0],
            "why": row.why,
            f"groups: predictions (* below {minimum})": ", ".join(
                f"{g} {int(n):,}{'*' if small else ''}"
                for g, n, small in sizes.loc[
                    sizes["attribute"] == row.attribute, ["group_name", "n", "small"]
                ].itertuples(index=False)
            ),
        }
        for row in verdicts.itertuples()
    ]
    _print_frame(pd.DataFrame(rows), title=f"{label}: verdict and group sizes per attribute")
    findings = first_screen.ranked_findings(frames)
    if findings.empty:
        _say("flagged: none")
    else:
        shown = findings.head(first_screen.FIRST_SCREEN_ROWS)
        more = len(findings) - len(shown)
        _print_frame(
            shown[FINDING_COLUMNS.keys()].rename(columns=FINDING_COLUMNS),
            title="flagged (BH-adjusted p < alpha), largest first"
            + (f"; {more} more with --all" if more else ""),
        )
        _print_glossary(shown["metric"])
    skipped = first_screen.untested(frames)
    total = len(first_screen.comparisons(frames, deduplicate=False))
    _say(
        f"not tested: {int(skipped.sum())} of {total} comparisons"
        + "".join(f"; {n} {kind}" for kind, n in skipped.items())
    )
    small = sizes[sizes["small"]]
    if not small.empty:
        _say(
            f"groups below min_group_size {minimum} (metrics kept, not tested): "
            + "; ".join(
                f"{a}: {g} ({int(n)})"
                for a, g, n in small[["attribute", "group_name", "n"]].itertuples(index=False)
            )
        )
    undefined = first_screen.undefined_metrics(frames)
    _say(
        f"undefined metric values: {int(undefined.sum())}"
        + "".join(f"; {n} {reason}" for reason, n in undefined.items())
    )


# The summary's flagged findings (tasks.report.ranked_findings) and their headers.
FINDING_COLUMNS = {
    "attribute": "attribute",
    "group_name": "group",
    "reference": "against",
    "metric": "metric",
    "rate_group": "group rate",
    "rate_reference": "reference rate",
    "difference": "difference",
    "low": "hdi_low",
    "high": "hdi_high",
    "p_adjusted": "p_adjusted",
}


def _emit(frame: Any, format_: str) -> None:
    """Write a frame to standard output as CSV or JSON records (for other tools)."""
    if format_ == "csv":
        sys.stdout.write(frame.to_csv(index=False))
    else:
        sys.stdout.write(frame.to_json(orient="records", date_format="iso", indent=1) + "\n")


def _print_series(
    engine: Any,
    metric: str,
    attribute: str | None,
    group: str | None,
    audit: str | None,
    model: str | None,
    since: datetime | None,
    until: datetime | None,
    format_: str,
) -> None:
    """One row per run: the metric's value for each group, and the spread between them."""
    from biasaudit.db.history import metric_series

    series = metric_series(engine, metric, attribute, group, audit, model, since, until)
    if series.empty:
        _fail("no stored values match")
    if series["attribute"].nunique() > 1 and attribute is None:
        _fail(f"several attributes hold {metric}: choose one with --attribute")
    wide = series.pivot_table(
        index=["run_id", "audit_name", "model_id", "version", "as_of"],
        columns="group_name",
        values="value",
    ).reset_index()
    groups = [
        c for c in wide.columns if c not in ("run_id", "audit_name", "model_id", "version", "as_of")
    ]
    wide.columns.name = None
    if len(groups) > 1:
        wide["max - min"] = wide[groups].max(axis=1) - wide[groups].min(axis=1)
    if format_ != "table":
        _emit(wide, format_)
        return
    wide["as_of"] = wide["as_of"].astype(str).str[:10]
    _print_frame(
        wide, title=f"{metric} by {attribute or series['attribute'].iloc[0]}, one row per run"
    )


def _print_stage_tables(
    engine: Any, run_id: int, attribute: str | None, metric: str | None
) -> None:
    from biasaudit.db.history import (
        FLAGGED_COLUMNS,
        META_COLUMNS,
        PLANNING_COLUMNS,
        flagged_detections,
        run_results,
    )
    from biasaudit.db.models import DetectionResult, MetaMetricResult, PlanningResult

    planning = run_results(engine, PlanningResult, run_id, attribute, metric)
    if not planning.empty:
        _print_frame(planning[PLANNING_COLUMNS], title="planning: predictions needed vs available")
    flagged = flagged_detections(run_results(engine, DetectionResult, run_id, attribute, metric))
    if not flagged.empty:
        _print_frame(flagged[FLAGGED_COLUMNS], title="detection: flagged (BH-adjusted p < alpha)")
    meta = run_results(engine, MetaMetricResult, run_id, attribute, metric)
    if not meta.empty:
        _print_frame(
            meta[META_COLUMNS], title="meta-metrics: naive and corrected between-group variance"
        )


@app.command()
def abandon(
    run_id: Annotated[int, typer.Argument(help="A run left 'running' by a process that is gone")],
    db: DbOption = None,
) -> None:
    """Mark a running run failed as abandoned, so later runs of its audit stop waiting for it."""
    from biasaudit.db.runs import abandon_run

    if not abandon_run(_engine(db), run_id):
        _fail(f"run {run_id} is not running")
    _say(f"run {run_id} marked failed (abandoned)")


SHOWN_CHANGES = 10


def _instead_of_overlap(start: datetime | None, end: datetime) -> str:
    """One line: how to test changes when two runs' windows overlap (``start``, ``end``: the
    later run's window)."""
    days = (end - start).days if start is not None else 0
    disjoint = (
        f"compare runs whose --as-of are at least {days} days apart (the window's length)"
        if days >= 1
        else 'give the audit a bounded window (e.g. window = "last_30_days") and compare runs '
        "whose --as-of are 30 days apart"
    )
    return (
        "to test changes instead: monitor the audit ([audits.monitor] in its configuration, then "
        f"`biasaudit history --monitor`), or {disjoint}"
    )


@app.command()
def compare(
    run_id: Annotated[int, typer.Argument(help="The later run")],
    other: Annotated[
        int | None, typer.Argument(help="The earlier run (default: the previous as-of)")
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Every change, not only significant")
    ] = False,
    format_: FormatOption = "table",
    db: DbOption = None,
) -> None:
    """What changed between two runs, and which changes are statistically significant (runs
    whose windows overlap share data: their changes are shown untested)."""
    import pandas as pd

    from biasaudit.db.history import previous_as_of_run, run_metrics
    from biasaudit.schemas.report import run_label
    from biasaudit.tasks.compare import compare_metrics, windows_overlap

    _check_format(format_)
    engine = _engine(db)
    after = _run_or_fail(engine, run_id)
    if other is None:
        previous = previous_as_of_run(engine, after.audit_name, after.model_id, after.as_of)
        if previous is None:
            _fail(
                f"{run_label(run_id, after.version)} is the first as-of of {after.audit_name}: "
                "nothing to compare with"
            )
        other = previous.id
    before = _run_or_fail(engine, other)
    if (before.audit_name, before.model_id) != (after.audit_name, after.model_id):
        _fail(
            f"{run_label(other, before.version)} audits {before.audit_name} of model "
            f"{before.model_id}, {run_label(run_id, after.version)} {after.audit_name} of "
            f"{after.model_id}: compare runs of the same audit and model"
        )
    alpha = after.config["thresholds"]["alpha"]
    overlapping = windows_overlap(
        (before.window_start, before.window_end), (after.window_start, after.window_end)
    )
    changes = compare_metrics(
        run_metrics(engine, other), run_metrics(engine, run_id), alpha, overlapping
    )
    shown = changes if show_all else changes[changes["significant"] | (changes["status"] != "both")]
    if format_ != "table":
        _emit(shown, format_)
        return
    tested = (
        "the two windows overlap (they share predictions): no change is tested"
        if overlapping
        else f"{int(changes['significant'].sum())} significant changes (BH-adjusted p < {alpha}) "
        f"of {int(changes['p_value'].notna().sum())} tested"
    )
    _say(
        f"{after.audit_name}: {run_label(run_id, after.version)}, as of {after.as_of:%Y-%m-%d}, "
        f"against {run_label(other, before.version)}, as of {before.as_of:%Y-%m-%d}: {tested}; "
        f"{int((changes['status'] == 'appeared').sum())} appeared, "
        f"{int((changes['status'] == 'vanished').sum())} vanished"
    )
    if not overlapping:
        if not shown.empty:
            title = "changes" if show_all else "significant changes, appeared, vanished"
            _print_frame(shown, title=title)
        return
    _say(_instead_of_overlap(after.window_start, after.window_end))
    both = changes[changes["status"] == "both"]
    if not show_all:  # the largest moves, untested, and what appeared or vanished
        largest = both["change"].abs().sort_values(ascending=False).index[:SHOWN_CHANGES]
        shown = pd.concat([changes.loc[largest], changes[changes["status"] != "both"]])
    shown = shown.drop(columns=["p_value", "p_adjusted", "significant", "overlapping"])
    if not shown.empty:
        title = "changes, untested" + (
            ""
            if show_all
            else f": the {min(SHOWN_CHANGES, len(both))} largest of {len(both)} "
            "(--all shows every one), appeared, vanished"
        )
        _print_frame(shown, title=title)


@app.command()
def backfill(
    audit: Annotated[
        str, typer.Argument(metavar="AUDIT", help="Name of the audit in the configuration")
    ],
    from_: Annotated[str, typer.Option("--from", metavar="DATE", help="First as-of date (ISO)")],
    to: Annotated[str, typer.Option("--to", metavar="DATE", help="Last as-of date (ISO)")],
    every: Annotated[
        str, typer.Option(metavar="PERIOD", help="Calendar period: Nd (days) or Nmo (months)")
    ] = "1d",
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Run the audit as of the end of each calendar period from --from to --to (the last period
    ends at --to); exits 1 when any period failed."""
    import pandas as pd

    from biasaudit.db.engine import flow_url
    from biasaudit.flows.backfill import parse_period, periods
    from biasaudit.schemas.config import default_config_path, load_audit

    start, end = _date(from_, "--from"), _date(to, "--to")
    assert start is not None and end is not None
    try:
        moments = periods(start, end, parse_period(every))
    except ValueError as exc:
        raise Mistake(str(exc)) from None
    load_audit(Path(config or default_config_path()), audit)
    _engine(db).dispose()
    _prefect_environment()
    from biasaudit.flows.backfill import backfill_flow

    with console.status(f"backfilling {audit}, {len(moments)} periods ({FIRST_RUN_NOTE})"):
        outcomes = backfill_flow(audit, start, end, every, config, flow_url(db))
    _print_frame(pd.DataFrame(outcomes), title=f"backfill of {audit}")
    failed = [o for o in outcomes if "error" in o]
    if failed:
        _fail(
            f"{len(failed)} of {len(outcomes)} periods failed (first: {failed[0]['as_of']}: "
            f"{failed[0]['error']})"
        )


@app.command()
def backtest(
    audit: Annotated[
        str, typer.Argument(metavar="AUDIT", help="Name of the audit in the configuration")
    ],
    from_: Annotated[str, typer.Option("--from", metavar="DATE", help="First as-of date (ISO)")],
    to: Annotated[str, typer.Option("--to", metavar="DATE", help="Last as-of date (ISO)")],
    format_: Annotated[
        str,
        typer.Option(
            "--format", metavar="FORMAT", help="table (summary), csv or json (every night)"
        ),
    ] = "table",
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """What nightly monitored runs would have said from --from to --to (nothing is written)."""
    from biasaudit.db.engine import database_url
    from biasaudit.flows.monitoring import backtest as replay
    from biasaudit.schemas.config import default_config_path, load_audit

    _check_format(format_)
    configured = load_audit(Path(config or default_config_path()), audit)
    nights = replay(database_url(db), configured, _date(from_, "--from"), _date(to, "--to"))
    if format_ != "table":
        _emit(nights, format_)
        return
    keys = ["attribute", "group_name", "reference", "metric"]
    last = nights.sort_values("as_of").groupby(keys).tail(1).set_index(keys)
    first = nights[nights["alarm"]].groupby(keys)["as_of"].min()
    summary = last[["nights", "e_process", "cs_low", "cs_high", "crossed"]].assign(
        first_alarm=first
    )
    _say(
        f"backtest of {audit}: {nights['as_of'].nunique()} nightly runs, "
        f"{int(first.size)} of {len(last)} comparisons alarmed (e-BH, alpha "
        f"{configured.thresholds.alpha})"
    )
    _print_frame(summary.reset_index(), title="monitor at the last night; first e-BH alarm")


@app.command()
def report(
    run_id: Annotated[int, typer.Argument(help="The run to render")],
    out: Annotated[
        Path | None, typer.Option(help="Output file (default: reports/AUDIT-run-N.html)")
    ] = None,
    db: DbOption = None,
) -> None:
    """Render any stored run as a self-contained HTML report."""
    from biasaudit.flows.report import build_report, report_path, write_page

    engine = _engine(db)
    run = _run_or_fail(engine, run_id)
    path = out or report_path(run.audit_name, run_id)
    write_page(path, build_report(engine, run_id, str(path))[0])
    _say(f"wrote {path}")


@app.command()
def plan(
    metric: Annotated[str, typer.Option(help="ppr, tpr, fnr, tnr, fpr, ppv, npv or acc")],
    rate: Annotated[
        list[float], typer.Option(help="Expected rate of the metric in a group (repeat)")
    ],
    prev: Annotated[
        list[float] | None, typer.Option(help="Prevalence per group (for tpr/fnr/tnr/fpr)")
    ] = None,
    ppr: Annotated[
        list[float] | None, typer.Option(help="Selection rate per group (for ppv/npv)")
    ] = None,
    tau: Annotated[
        float | None, typer.Option(help="Disparity to detect (default: the gap)")
    ] = None,
    alpha: Annotated[float, typer.Option(help="Significance level")] = 0.05,
    power: Annotated[float, typer.Option(help="Power")] = 0.80,
) -> None:
    """How many predictions per group an audit needs, before any data exists."""
    import numpy as np

    from biasaudit.tasks.planning import plan_from_rates

    try:
        result = plan_from_rates(_metric(metric), rate, prev, ppr, tau, alpha, power)
    except ValueError as exc:
        _fail(str(exc))
    g1, g2 = result["groups compared"]
    console.print(
        f"{metric}: group {g1 + 1} at {rate[g1]:.3f} vs group {g2 + 1} at {rate[g2]:.3f}; "
        f"detect a disparity of {result['tau']:.3f} at α = {alpha}, power {power}"
    )
    table = Table(title="predictions to collect (labelled, per group)")
    for column in ("allocation", f"group {g1 + 1}", f"group {g2 + 1}", "total"):
        table.add_column(column, justify="right")
    for name in ("equal allocation", "neyman allocation"):
        n1, n2 = (int(np.ceil(v)) for v in result[name])
        table.add_row(name.split()[0], f"{n1:,}", f"{n2:,}", f"{n1 + n2:,}")
    console.print(table)
    console.print(
        f"bias measure N (sample-size-bias-measure eq. 1, per group, one-sided): "
        f"{int(np.ceil(result['bias measure N per group'])):,}; difference "
        f"{result['difference']:+.3f}; ratio {result['ratio']:.3f}"
    )
    if "chi-square per group" in result:
        console.print(
            f"chi-square test of all {len(rate)} groups: "
            f"{int(np.ceil(result['chi-square per group'])):,} per group"
        )


@app.command()
def rank(
    run_ids: Annotated[list[int], typer.Argument(help="Runs of the models to rank")],
    metric: Annotated[str, typer.Option(help="Error rate to compare, e.g. fnr or fpr")],
    attribute: Annotated[str, typer.Option(help="Sensitive attribute")],
    group: Annotated[str, typer.Option(help="Group")],
    reference: Annotated[str, typer.Option(help="Reference group, or 'rest'")] = "rest",
    db: DbOption = None,
) -> None:
    """Rank models for bias by N, difference and ratio, and show where the rankings disagree."""
    from biasaudit.db.history import rates_by_run
    from biasaudit.schemas.metric_ids import BASE_RATES, GLOSSARY, TESTED_RATES
    from biasaudit.tasks.planning import rank_bias

    metric = _metric(metric)
    if metric in BASE_RATES:
        raise Mistake(
            f"--metric {metric} ({GLOSSARY[metric][0]}) is the outcome's base rate, context that "
            f"is never tested, so no model is ranked by it; rank by one of {', '.join(TESTED_RATES)}"
        )
    rates = rates_by_run(_engine(db), run_ids, attribute, group, reference, metric)
    missing = sorted(set(run_ids) - set(rates["run_id"]))
    if missing:
        _fail(f"runs {missing} have no {metric} of {attribute}={group} against {reference}")
    ranked = rank_bias(rates)
    columns = [
        "run_id",
        "audit_name",
        "model_id",
        "version",
        "value_group",
        "value_reference",
        "difference",
        "ratio",
        "bias_n",
        "rank_difference",
        "rank_ratio",
        "rank_bias_n",
        "disagree",
    ]
    _print_frame(
        ranked[columns],
        title=f"{metric} of {attribute}={group} vs {reference}: "
        "rank 1 = least biased (smallest D and R, largest N)",
    )


@app.command()
def serve(
    config: ConfigOption = None,
    db: DbOption = None,
    cron: Annotated[str, typer.Option(metavar="CRON", help="Schedule (cron syntax)")] = "0 2 * * *",
    timezone_: Annotated[
        str, typer.Option("--timezone", metavar="ZONE", help="Time zone of the schedule")
    ] = "UTC",
    task_runner: Annotated[
        str, typer.Option(metavar="RUNNER", help="threads, or dask (the dask extra)")
    ] = "threads",
    dask_address: Annotated[
        str | None, typer.Option(metavar="ADDRESS", help="Dask scheduler, e.g. tcp://host:8786")
    ] = None,
    name: Annotated[str, typer.Option(metavar="NAME", help="Deployment name")] = "nightly",
) -> None:
    """Serve the nightly deployment (runs until stopped; trigger with
    `prefect deployment run 'nightly/NAME' -p audits='["AUDIT"]'`)."""
    from biasaudit.db.engine import database_url, make_engine, safe_url
    from biasaudit.db.migrate import upgrade
    from biasaudit.schemas.config import configured_names, default_config_path

    if task_runner not in ("threads", "dask"):
        raise Mistake(f"--task-runner is threads or dask, not {task_runner!r}")
    path = str(Path(config or default_config_path()).resolve())
    names = configured_names(path)  # an unreadable file fails now; a bad audit fails its runs
    make_engine(db).dispose()
    upgrade(db)
    _prefect_environment(logs=True)
    from biasaudit.flows.nightly import serve as serve_nightly

    _say(
        f"serving nightly/{name}: {len(names)} audits of {path} on "
        f"{safe_url(database_url(db))}, cron {cron!r} ({timezone_}); Ctrl-C stops"
    )
    serve_nightly(path, db, cron, timezone_, task_runner, dask_address, name)


@app.command()
def metrics() -> None:
    """List every metric: its id, name and formula, and whether audits test it between groups."""
    from biasaudit.schemas.metric_ids import GLOSSARY, METRIC_IDS, N_MEANS, SYNONYMS, describe, role

    _say(f"metrics ({N_MEANS}); an id, a name or a synonym may be given wherever a metric is:")
    for metric in METRIC_IDS:
        name = GLOSSARY[metric][0].lower().replace(" ", "_")
        also = [s for s, m in SYNONYMS.items() if m == metric and s != name]
        _say(
            f"{describe(metric)}\n    {role(metric)}"
            + (f"; also: {', '.join(also)}" if also else "")
        )


def _source_problems(audit: Any, db: str | None) -> list[str]:
    """Why the audit's source cannot be read (db.source.source_problems), from the catalogue of
    its database (``source_db``, else the store); or why it could not be looked at."""
    from sqlalchemy.exc import SQLAlchemyError

    from biasaudit.db.engine import DatabaseMissing, DatabaseUrlError, database_url, make_engine
    from biasaudit.db.source import source_problems, source_url
    from biasaudit.flows.logs import one_line

    try:
        engine = make_engine(source_url(audit, database_url(db)), create=False)
        try:
            return source_problems(engine, audit)
        finally:
            engine.dispose()
    except (DatabaseMissing, DatabaseUrlError, SQLAlchemyError) as exc:
        return [f"source {audit.source!r} not checked: {one_line(exc, with_type=False)}"]


@app.command()
def audits(config: ConfigOption = None, db: DbOption = None) -> None:
    """List the configured audits and validate each one: its configuration, and its source's
    table and columns in the database (source_db, else --db), reading no rows. Prints one line
    per problem; exit 1 if any audit is invalid."""
    import pandas as pd

    from biasaudit.schemas.config import (
        ConfigError,
        configured_names,
        default_config_path,
        load_audit,
    )

    path = Path(config or default_config_path())
    rows, problems = [], []
    for name in configured_names(path):
        try:
            audit = load_audit(path, name)
        except ConfigError as exc:
            found = [line.strip() for line in str(exc).splitlines()[1:]] or [str(exc)]
            rows.append({"audit": name, "model": "", "window": "", "source": "", "attributes": ""})
        else:
            found = _source_problems(audit, db)
            rows.append(
                {
                    "audit": audit.name,
                    "model": audit.model_id,
                    "window": audit.window,
                    "source": audit.source,
                    "attributes": ", ".join(audit.attributes),
                }
            )
        rows[-1]["status"] = "invalid" if found else "ok"
        problems += [f"audit {name!r}: {problem}" for problem in found]
    _print_frame(pd.DataFrame(rows), title=f"audits in {path}")
    for problem in problems:
        _say(problem)
    bad = sum(row["status"] != "ok" for row in rows)
    if bad:
        _fail(f"{bad} of {len(rows)} audits in {path} are invalid")


@app.command()
def quarantine(
    run_id: Annotated[
        int | None, typer.Argument(metavar="[RUN]", help="Rows quarantined by this run")
    ] = None,
    from_load: Annotated[
        bool, typer.Option("--load", help="Rows quarantined by `biasaudit load`")
    ] = False,
    limit: Annotated[int, typer.Option(metavar="N", help="At most N rows (0: all)")] = 50,
    format_: FormatOption = "table",
    db: DbOption = None,
) -> None:
    """Quarantined rows with the rule each broke: of one run, or of loads (--load)."""
    import pandas as pd
    from sqlalchemy import select

    from biasaudit.db.models import QuarantinedRow

    _check_format(format_)
    if (run_id is None) == (not from_load):
        raise Mistake("give a RUN id or --load (not both)")
    engine = _engine(db)
    if run_id is not None:
        _run_or_fail(engine, run_id)
    query = select(
        QuarantinedRow.run_id,
        QuarantinedRow.source,
        QuarantinedRow.row_number,
        QuarantinedRow.row_ref,
        QuarantinedRow.column_name,
        QuarantinedRow.value,
        QuarantinedRow.rule,
        QuarantinedRow.created_at,
    ).order_by(QuarantinedRow.id)
    query = query.where(
        QuarantinedRow.run_id == run_id if run_id is not None else QuarantinedRow.run_id.is_(None)
    )
    if limit > 0:
        query = query.limit(limit)
    with engine.connect() as connection:
        rows = pd.DataFrame(
            connection.execute(query).mappings().all(), columns=list(query.selected_columns.keys())
        )
    if format_ != "table":
        _emit(rows, format_)
        return
    if rows.empty:
        _say("no quarantined rows")
        return
    _print_frame(rows.drop(columns=["created_at"]), title="quarantined rows and their reasons")


if __name__ == "__main__":
    app()
