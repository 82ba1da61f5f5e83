"""Where the database is, how to connect to it, and how long any database call may take.

The URL comes from ``--db``, else ``BIASAUDIT_DATABASE_URL``, else the SQLite file ``./biasaudit.db``.
A URL may also be a reference ``env:NAME`` (read from the environment variable ``NAME`` when the
engine is made): flows receive such a reference, never a password (Prefect stores flow parameters).

Every connection has bounded waits, configurable by environment variable:
``BIASAUDIT_CONNECT_TIMEOUT_SECONDS`` (default 10) to open a connection, and
``BIASAUDIT_STATEMENT_TIMEOUT_SECONDS`` (default 600) for one statement (PostgreSQL's
``statement_timeout``, MariaDB's client read/write timeouts, SQLite's busy timeout). On PostgreSQL
TCP keepalives and ``tcp_user_timeout``, the client's and (for the engine's sessions) the
server's (``SERVER_TCP``), also end a connection whose network went dead on either side, and the
client gives up on any one call (a statement, a fetch, a commit) that has no answer a second after
the statement timeout, closing its connection: a server that stopped (SIGSTOP, a frozen VM) keeps
its TCP connections answering keepalives and would never enforce its own timeout. On MariaDB the
opening of a connection (greeting, authentication) is bounded by the connect timeout too, not
only its TCP connect. A timed-out call raises OperationalError, which the retry policy (db.retry)
retries.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

from biasaudit.schemas.urls import hidden, holds_secret

DEFAULT_URL = "sqlite:///biasaudit.db"
URL_ENV = "BIASAUDIT_DATABASE_URL"
REFERENCE_PREFIX = "env:"
POSTGRES_DRIVER = "postgresql+psycopg"
CONNECT_TIMEOUT_ENV = "BIASAUDIT_CONNECT_TIMEOUT_SECONDS"
STATEMENT_TIMEOUT_ENV = "BIASAUDIT_STATEMENT_TIMEOUT_SECONDS"


class DatabaseUrlError(ValueError):
    """A database URL that cannot be used; the message never shows a password."""


class DatabaseMissing(FileNotFoundError):
    """A SQLite database file that does not exist (and was not to be created)."""


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise DatabaseUrlError(f"{name}={raw!r} is not a number of seconds") from None
    if not 0 < value < 1e6:
        raise DatabaseUrlError(f"{name}={raw!r} must be between 0 and 1,000,000 seconds")
    return value


def connect_timeout() -> float:
    """Seconds to wait for a connection to open."""
    return _seconds(CONNECT_TIMEOUT_ENV, 10.0)


def statement_timeout() -> float:
    """Seconds one statement may run (or wait on a lock) before it fails."""
    return _seconds(STATEMENT_TIMEOUT_ENV, 600.0)


def answer_deadline() -> float:
    """Seconds the client waits for the server's answer to one call before it gives up on the
    connection: the statement timeout, and a second for the server's own timeout error to
    arrive."""
    return statement_timeout() + 1.0


# The server's side of a dead network (PostgreSQL 12 and later): it probes an idle client after
# 10 s, every 5 s, and ends the session after 3 unanswered probes (25 s), or once data it sent has
# gone unacknowledged for 60 s, so a session whose client vanished releases its locks (the
# server's own defaults leave it for hours). docs/operations.md, "A lost session".
SERVER_TCP = {
    "tcp_keepalives_idle": 10,
    "tcp_keepalives_interval": 5,
    "tcp_keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}


def server_tcp_options() -> str:
    """SERVER_TCP as libpq's ``options`` take it (the engine's sessions ask for it when they
    connect; an ADBC stream's read-only session does without: it holds no lock a run needs)."""
    return " ".join(f"-c{name}={value}" for name, value in SERVER_TCP.items())


def libpq_options() -> dict[str, Any]:
    """libpq's connection options for the engine's limits: connect timeout, server-side statement
    timeout, TCP keepalives and ``tcp_user_timeout`` (for a dead network)."""
    return {
        "connect_timeout": max(1, round(connect_timeout())),
        "options": f"-cstatement_timeout={round(statement_timeout() * 1000)}",  # as URIs take it
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": round(min(statement_timeout(), 60.0) * 1000),
    }


def database_url(url: str | None = None) -> str:
    """The URL to use: the explicit one, else the environment's, else the embedded SQLite default.
    A reference ``env:NAME`` resolves to the value of the environment variable ``NAME``."""
    url = url or os.environ.get(URL_ENV) or DEFAULT_URL
    if url.startswith(REFERENCE_PREFIX):
        name = url[len(REFERENCE_PREFIX) :]
        value = os.environ.get(name)
        if not value:
            raise DatabaseUrlError(f"database URL reference {url}: ${name} is not set")
        return value
    return url


def safe_url(url: str | None) -> str:
    """The URL as it may be shown, logged or stored: its password and any credential in its
    query string replaced by ***."""
    if url is None:
        return "(none)"
    if url.startswith(REFERENCE_PREFIX):
        return url
    try:
        return hidden(make_url(url))
    except (ArgumentError, ValueError):
        return "(malformed URL)"


def flow_url(url: str | None) -> str | None:
    """What to hand to a Prefect flow run for ``url``: the URL itself when it holds no password
    (in its password field or its query string), else the reference ``env:BIASAUDIT_DATABASE_URL``
    with the URL put in that environment variable (inherited by flow runs started from this
    process). Prefect never sees a password."""
    if url is None or url.startswith(REFERENCE_PREFIX):
        return url
    if not holds_secret(parse_url(url)):
        return url
    os.environ[URL_ENV] = url
    return REFERENCE_PREFIX + URL_ENV


def parse_url(url: str) -> URL:
    """The parsed URL, or DatabaseUrlError naming the problem without the password. A
    ``postgresql://`` URL without a driver uses psycopg 3 (SQLAlchemy 2.0's own default for it is
    psycopg2, which is not installed)."""
    try:
        parsed = make_url(url)
        return (
            parsed.set(drivername=POSTGRES_DRIVER) if parsed.drivername == "postgresql" else parsed
        )
    except (ArgumentError, ValueError):
        raise DatabaseUrlError(
            "malformed database URL (expected dialect+driver://user@host:port/database "
            "or sqlite:///path)"
        ) from None


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL (None for in-memory databases and other dialects)."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def _connect_args(url: URL) -> dict[str, Any]:
    connect, statement = connect_timeout(), statement_timeout()
    backend, driver = url.get_backend_name(), url.get_driver_name()
    if backend == "sqlite":
        return {"timeout": min(statement, 60.0)}
    if backend == "postgresql" and driver in ("psycopg", "psycopg2"):
        return libpq_options()
    if backend in ("mysql", "mariadb") and driver == "pymysql":
        return {
            "connect_timeout": max(1, round(connect)),
            "read_timeout": max(1, round(statement)),
            "write_timeout": max(1, round(statement)),
            # TIMESTAMP values in UTC, like every other moment biasaudit reads or writes.
            "init_command": "SET time_zone = '+00:00'",
        }
    return {}


# Spellings of a database kind whose driver biasaudit does not install, and the one it does.
WORKING_SPELLINGS = {
    "postgres": (POSTGRES_DRIVER, "postgresql://", " (or postgresql+psycopg://)"),
    "postgresql+psycopg2": (POSTGRES_DRIVER, "postgresql://", " (or postgresql+psycopg://)"),
    "postgresql+pg8000": (POSTGRES_DRIVER, "postgresql://", " (or postgresql+psycopg://)"),
    "postgresql+asyncpg": (POSTGRES_DRIVER, "postgresql://", " (or postgresql+psycopg://)"),
    "mysql": ("mysql+pymysql", "mysql+pymysql://", ""),
    "mysql+mysqldb": ("mysql+pymysql", "mysql+pymysql://", ""),
    "mysql+mysqlconnector": ("mysql+pymysql", "mysql+pymysql://", ""),
    "mariadb": ("mysql+pymysql", "mysql+pymysql://", ""),
    "mariadb+mysqldb": ("mysql+pymysql", "mysql+pymysql://", ""),
    "mariadb+mariadbconnector": ("mysql+pymysql", "mysql+pymysql://", ""),
}


def _working_spelling(parsed: URL) -> str:
    """``; use <the URL spelt with the installed driver>``, its password hidden, for a kind
    spelt as in WORKING_SPELLINGS; empty for any other."""
    known = WORKING_SPELLINGS.get(parsed.drivername)
    if known is None:
        return ""
    driver, scheme, alternative = known
    rendered = parsed.set(drivername=driver).render_as_string(hide_password=False)
    shown = safe_url(scheme + rendered.split("://", 1)[1])
    return f"; use {shown}{alternative}"


def make_engine(url: str | None = None, *, create: bool = True) -> Engine:
    """An engine for ``url`` with bounded connection and statement times; SQLite gets foreign
    keys, WAL and a busy timeout for concurrent runs. With ``create=False`` a SQLite file that
    does not exist raises DatabaseMissing instead of being created empty."""
    parsed = parse_url(database_url(url))
    path = sqlite_path(parsed)
    if path is not None and not create and not path.exists():
        raise DatabaseMissing(
            f"database file {path} does not exist (create it with `biasaudit db upgrade`)"
        )
    try:
        if path is not None or parsed.get_backend_name() == "sqlite":
            engine = create_engine(parsed, connect_args=_connect_args(parsed))

            @event.listens_for(engine, "connect")
            def _sqlite_pragmas(dbapi_connection, _record):  # pragma: no cover - trivial
                cursor = dbapi_connection.cursor()
                cursor.execute("PRAGMA foreign_keys=ON")
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.close()

            return engine
        engine = create_engine(parsed, pool_pre_ping=True, connect_args=_connect_args(parsed))
        if (
            parsed.get_backend_name() in ("mysql", "mariadb")
            and parsed.get_driver_name() == "pymysql"
        ):
            opening = _opening_bounded_pymysql(connect_timeout())

            @event.listens_for(engine, "do_connect")
            def _connect_mysql(_dialect, _record, cargs, cparams):
                return opening(*cargs, **cparams)

        if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "psycopg":
            connection_class = _answering_psycopg(answer_deadline())

            @event.listens_for(engine, "do_connect")
            def _connect(_dialect, _record, cargs, cparams):
                options = " ".join(filter(None, [cparams.get("options"), server_tcp_options()]))
                return connection_class.connect(*cargs, **{**cparams, "options": options})

    except NoSuchModuleError:
        raise DatabaseUrlError(
            f"unknown database kind {parsed.drivername!r} in {safe_url(str(parsed))}"
            + _working_spelling(parsed)
        ) from None
    except ImportError as exc:
        raise DatabaseUrlError(
            f"cannot use database {safe_url(parsed.render_as_string(hide_password=False))}: "
            f"its driver module {exc.name!r} is not installed" + _working_spelling(parsed)
        ) from None
    except ArgumentError as exc:
        raise DatabaseUrlError(
            f"cannot use database {safe_url(parsed.render_as_string(hide_password=False))}: "
            f"{type(exc).__name__}"
        ) from None
    return engine


def _opening_bounded_pymysql(seconds: float) -> Any:
    """PyMySQL's connection class, whose opening (the server's greeting, authentication, the
    first statements) waits at most ``seconds`` for each read and write: PyMySQL bounds only the
    TCP connect by ``connect_timeout`` and reads the greeting with the read timeout (the statement
    timeout), so a retry through a silent network would wait that long before failing."""
    import pymysql  # type: ignore[import-untyped]  # (no stubs installed)

    class OpeningBounded(pymysql.connections.Connection):
        _read_timeout: int | None
        _write_timeout: int | None

        def connect(self, sock: Any = None) -> None:
            read, write = self._read_timeout, self._write_timeout
            self._read_timeout = self._write_timeout = max(1, round(seconds))
            try:
                super().connect(sock)
            finally:  # later reads and writes: the statement's limits again
                self._read_timeout, self._write_timeout = read, write

    return OpeningBounded


def _answering_psycopg(deadline: float) -> Any:
    """psycopg's connection class, with every call that waits on the server (``wait``: execute,
    fetch, commit, rollback) given up after ``deadline`` seconds: the connection is then closed
    (its state is unknown) and the call raises OperationalError."""
    import psycopg
    from psycopg.errors import _WaitTimeout

    class Answering(psycopg.Connection):
        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            if args[1:] or "timeout" in kwargs:  # the caller's own limit (psycopg's notifies)
                return super().wait(gen, *args, **kwargs)
            kwargs["timeout"] = deadline
            try:
                return super().wait(gen, *args, **kwargs)
            except _WaitTimeout:
                self.pgconn.finish()
                raise psycopg.OperationalError(
                    f"no answer within {deadline:g} s ({STATEMENT_TIMEOUT_ENV} + 1 s); "
                    "connection closed"
                ) from None

    return Answering


@contextmanager
def one_snapshot(engine: Engine) -> Iterator[Connection]:
    """A connection whose reads all see one snapshot of the database, so that the several
    statements of one scan (duplicate ids, the GROUP BY, the suspect rows) agree on every row
    while rows are inserted and labels arrive: PostgreSQL in a read-only REPEATABLE READ
    transaction (its default, READ COMMITTED, takes a snapshot per statement), MariaDB at
    REPEATABLE READ (InnoDB's consistent read, whatever the server's default), SQLite with an
    explicit BEGIN (pysqlite begins none before a SELECT); DuckDB's transaction is one already.
    Nothing is written: the transaction is rolled back when the block ends."""
    with engine.connect() as connection:
        backend = engine.dialect.name
        if backend == "postgresql":
            connection.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
        elif backend in ("mysql", "mariadb"):
            connection.execution_options(isolation_level="REPEATABLE READ")
        elif backend == "sqlite":
            connection.exec_driver_sql("BEGIN")
        try:
            yield connection
        except OperationalError:
            # A dropped or silent server: closed, not rolled back (nothing was written), so
            # that leaving never waits on a server that does not answer.
            connection.invalidate()
            raise


@contextmanager
def engine_scope(url: str | None = None) -> Iterator[Engine]:
    """An engine for one unit of work, its connections closed when the block ends."""
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()
