"""Short logs for handled errors: one line, no traceback; and a terminal without Prefect's lines.

Prefect logs a failed task or flow run with its whole traceback (65 to 1,000 lines). For the
errors biasaudit raises on purpose (configuration, data, database reachability), the message
already says what is wrong: ``install_short_errors`` adds a filter to Prefect's and the root
logger's handlers that drops the traceback of those errors and keeps the first line of the
message. Other exceptions (bugs) keep their traceback. ``BIASAUDIT_DEBUG=1`` turns it off.

``quiet_prefect_console`` keeps Prefect's own lines off the terminal of a command that prints its
results itself; they still reach a Prefect server (its API handler is another handler).
"""

from __future__ import annotations

import logging
import os

DEBUG_ENV = "BIASAUDIT_DEBUG"
MAX_LINE = 400


class AuditsFailed(RuntimeError):
    """Some audits of a nightly run failed; the message names each with its error."""


def handled_errors() -> tuple[type[BaseException], ...]:
    """The exception types whose message alone is the whole story."""
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    from biasaudit.db.engine import DatabaseMissing, DatabaseUrlError
    from biasaudit.db.retry import StepFailed
    from biasaudit.db.sources.catalogue import SourceError
    from biasaudit.db.sources.read import EmptyWindow
    from biasaudit.db.store.migrate import UpgradeError
    from biasaudit.db.store.runs import RunInProgress, RunLost
    from biasaudit.schemas.config import ConfigError
    from biasaudit.schemas.quarantine import SchemaFailure, TooManyInvalidRows

    return (
        AuditsFailed,
        ConfigError,
        EmptyWindow,
        SourceError,
        TooManyInvalidRows,
        SchemaFailure,
        RunInProgress,
        RunLost,
        DatabaseUrlError,
        DatabaseMissing,
        UpgradeError,
        StepFailed,
        DBAPIError,
        SQLAlchemyError,
    )


def one_line(error: BaseException, with_type: bool = True, limit: int = MAX_LINE) -> str:
    """``Type: message`` on one line of at most ``limit`` characters (SQLAlchemy's SQL and
    parameters left out)."""
    from sqlalchemy.exc import DBAPIError

    message = str(error.orig) if isinstance(error, DBAPIError) else str(error)
    joined = " ".join(line.strip() for line in message.splitlines() if line.strip())
    if not with_type and joined:
        return joined[:limit]
    return f"{type(error).__name__}: {joined}"[:limit]


class ShortHandledErrors(logging.Filter):
    """Drop the traceback of handled errors and keep one line of their message."""

    def filter(self, record: logging.LogRecord) -> bool:
        info = record.exc_info
        error = info[1] if info else None
        if error is None and record.args and isinstance(record.args, tuple):
            error = next((a for a in record.args if isinstance(a, BaseException)), None)
        if error is not None and isinstance(error, handled_errors()):
            prefix = record.getMessage().split(":", 1)[0]
            record.msg, record.args = f"{prefix}: {one_line(error)}", None
            record.exc_info, record.exc_text = None, None
        return True


_FILTER = ShortHandledErrors()


def install_short_errors() -> None:
    """Add the filter to every handler of Prefect's loggers and the root logger (idempotent)."""
    if os.environ.get(DEBUG_ENV) == "1":
        return
    import prefect.main  # noqa: F401 - configures Prefect's logging: its handlers must exist first

    for name in (None, "prefect", "prefect.flow_runs", "prefect.task_runs", "prefect.engine"):
        for handler in logging.getLogger(name).handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)


class WithoutPrefectLines(logging.Filter):
    """Drops the records of Prefect's loggers; biasaudit's own warnings and other libraries'
    still pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name != "prefect" and not record.name.startswith("prefect.")


def quiet_prefect_console() -> None:
    """Keep Prefect's log lines off the terminal (idempotent): the filter goes on the console
    handlers only, so a configured Prefect server still receives every line."""
    import prefect.main  # noqa: F401 - configures Prefect's logging: its handlers must exist first
    from prefect.logging.handlers import PrefectConsoleHandler

    quiet = WithoutPrefectLines()
    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrefectConsoleHandler) and not any(
            isinstance(f, WithoutPrefectLines) for f in handler.filters
        ):
            handler.addFilter(quiet)
