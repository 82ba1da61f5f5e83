"""What every command shares: the Typer apps, one clear line per mistake, the database engine
for a command, dates, metric names and printing (plain text, passwords redacted, data escaped)."""

from __future__ import annotations

import atexit
import functools
import gc
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, NoReturn, overload

import click
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from biasaudit.schemas.names import printable, spreadsheet_frame
from biasaudit.schemas.urls import redact

DEBUG = {"on": False}

# A command's process ends without the interpreter's last garbage collections, which walk every
# object of the libraries it imported (1-2 s once Prefect, pandas and scipy are loaded): frozen,
# they are left to the operating system, which takes the memory back whole. Registered when the
# CLI is imported, before Prefect is, it runs after Prefect's exit handlers (the last logs and
# events sent).
atexit.register(gc.freeze)


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
AuditArgument = Annotated[
    str, typer.Argument(metavar="AUDIT", help="Name of the audit in the configuration")
]
FromOption = Annotated[str, typer.Option("--from", metavar="DATE", help="First as-of date (ISO)")]
ToOption = Annotated[str, typer.Option("--to", metavar="DATE", help="Last as-of date (ISO)")]


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
                from biasaudit.db.store.revision import (
                    head_revision,
                    is_newer,
                    newer_store,
                    store_revision,
                )

                current, head = store_revision(connection), head_revision()
                if is_newer(current, head):
                    raise Mistake(newer_store(f"database {shown}", str(current), head))
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
    from biasaudit.db.store.history import get_run

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


def _emit(frame: Any, format_: str) -> None:
    """Write a frame to standard output as CSV or JSON records (for other tools). CSV cells of
    text are spreadsheet-safe (schemas.names.spreadsheet_frame: no formula, no control or
    bidirectional character); JSON escapes them itself."""
    if format_ == "csv":
        sys.stdout.write(spreadsheet_frame(frame).to_csv(index=False))
    else:
        sys.stdout.write(frame.to_json(orient="records", date_format="iso", indent=1) + "\n")
