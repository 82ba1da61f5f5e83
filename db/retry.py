"""The retry policy of every database step: which errors are worth retrying, how often, how long.

A database that is unreachable, restarting or dropping connections raises SQLAlchemy's
OperationalError or InterfaceError, and so does a statement that waited on another session's lock
or ran past its timeout: those are retried with exponential backoff (base
``BIASAUDIT_RETRY_BASE_SECONDS``, default 2 s: waits of 2, 4 and 8 s) before the run fails with
``StepFailed``, one line saying which step, on which database, and what to do. Bad data and bad
configuration are never retried.
"""

from __future__ import annotations

import os

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from biasaudit.db.engine import STATEMENT_TIMEOUT_ENV, statement_timeout

RETRIES = 3
# Errors of a statement held up by another session rather than of an unreachable database:
# PostgreSQL's SQLSTATEs (statement or lock timeout, lock not available, deadlock, serialization
# failure), MariaDB's error numbers (lock wait timeout, deadlock), SQLite's message.
HELD_UP_SQLSTATES = frozenset({"57014", "55P03", "40P01", "40001"})
HELD_UP_MARIADB_ERRORS = frozenset({1205, 1213})
HELD_UP_SQLITE = "database is locked"
# MariaDB errors that PyMySQL raises as OperationalError but that no retry mends: access denied to
# the database, the user, a table, a column or an operation, and a failed CHECK constraint.
REFUSED_MARIADB_ERRORS = frozenset({1044, 1045, 1142, 1143, 1227, 4025})


class StepFailed(RuntimeError):
    """A database step that still failed on a transient error after its retries."""


def retry_base_seconds() -> float:
    """First backoff wait in seconds (doubles at each retry)."""
    return float(os.environ.get("BIASAUDIT_RETRY_BASE_SECONDS", "2"))


def is_transient(error: BaseException | None) -> bool:
    """Whether ``error`` says the database could not be reached or answered operationally (not
    a refusal: a missing privilege is not mended by waiting)."""
    return isinstance(error, (OperationalError, InterfaceError)) and (
        _code(error) not in REFUSED_MARIADB_ERRORS
    )


def _cause(error: BaseException) -> BaseException:
    """The database driver's error under SQLAlchemy's wrapper (whose text adds the SQL)."""
    return error.orig if isinstance(error, DBAPIError) and error.orig is not None else error


def _code(error: BaseException) -> object:
    """The driver's error code (MariaDB's error number; PostgreSQL's message)."""
    cause = _cause(error)
    return cause.args[0] if cause.args else None


def held_up(error: BaseException) -> bool:
    """Whether a transient ``error`` is a statement held up by a lock or its timeout."""
    cause = _cause(error)
    return (
        getattr(cause, "sqlstate", None) in HELD_UP_SQLSTATES
        or _code(error) in HELD_UP_MARIADB_ERRORS
        or HELD_UP_SQLITE in str(cause)
    )


def step_failed(what: str, where: str, error: BaseException) -> StepFailed:
    """The one line for a step that ``error`` (transient) still ended after its retries: what
    was being done, on which database, why, and what to do."""
    why = " ".join(str(_cause(error)).split())[:300]
    if held_up(error):
        advice = (
            f"another session may hold a lock on the tables it needs, or the statement ran past "
            f"{STATEMENT_TIMEOUT_ENV} ({statement_timeout():g} s): run it again once that "
            f"session has finished (PostgreSQL: see pg_locks and pg_stat_activity)"
        )
    else:
        advice = "check that the database is up and reachable, then run it again"
    return StepFailed(f"{what} on {where} failed ({why}); {advice}")
