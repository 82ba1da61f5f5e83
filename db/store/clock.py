"""The database's own clock: every "is this run still alive" decision is made by it.

Two machines auditing one store may disagree about the time by minutes (a clock behind, NTP not yet
synchronised, a VM resumed from a snapshot). A heartbeat time written by one client's clock and
judged by another's can make a live run look dead (and its results be thrown away) or a dead one
look alive. So a heartbeat is written as the server's ``now`` and a lease is judged lapsed by
comparing, in SQL, with the server's ``now``: both readings come from one clock, whichever client
wrote or reads them.

- PostgreSQL: ``clock_timestamp()`` (the time of the statement's evaluation; ``now()`` is the
  transaction's start), a ``timestamptz``.
- MariaDB/MySQL: ``UTC_TIMESTAMP(6)``, the UTC time with microseconds whatever the session's time
  zone; ``Moment`` columns hold UTC there (db.store.models).
- SQLite: ``strftime('%Y-%m-%d %H:%M:%f', 'now')``, UTC with milliseconds, a text that sorts as the
  moments stored by SQLAlchemy do (``YYYY-MM-DD HH:MM:SS.ffffff``). SQLite has no server: its clock
  is the clock of the machine running the process, which is the machine that holds the database
  file (SQLite over a network file system is unsupported: its locking is not reliable there), so
  every process that can open the file shares that one clock.
- Other dialects (DuckDB, which holds no audit runs in practice): ``CURRENT_TIMESTAMP``.
"""

from __future__ import annotations

from sqlalchemy import func, literal_column
from sqlalchemy.sql.elements import ColumnElement


def server_now(dialect: str, seconds_ago: float = 0.0) -> ColumnElement:
    """The database's current time (minus ``seconds_ago``) as a SQL expression comparable with
    the ``Moment`` columns of ``dialect`` (a dialect name, ``engine.dialect.name``)."""
    micros = round(seconds_ago * 1_000_000)
    if dialect == "postgresql":
        now = func.clock_timestamp()
        return now if not micros else now - literal_column(f"interval '{micros} microseconds'")
    if dialect in ("mysql", "mariadb"):
        now = func.utc_timestamp(literal_column("6"))
        return now if not micros else func.timestampadd(literal_column("MICROSECOND"), -micros, now)
    if dialect == "sqlite":
        shift = [f"{-seconds_ago:+.6f} seconds"] if micros else []
        return func.strftime("%Y-%m-%d %H:%M:%f", "now", *shift)
    return func.current_timestamp()
