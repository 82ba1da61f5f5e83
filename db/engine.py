"""Where the database is and how to connect to it.

The URL comes from ``--db``, else ``BIASAUDIT_DATABASE_URL``, else the SQLite file ``./biasaudit.db``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event

DEFAULT_URL = "sqlite:///biasaudit.db"
URL_ENV = "BIASAUDIT_DATABASE_URL"


def database_url(url: str | None = None) -> str:
    """The URL to use: the explicit one, else the environment's, else the embedded SQLite default."""
    return url or os.environ.get(URL_ENV) or DEFAULT_URL


def make_engine(url: str | None = None) -> Engine:
    """An engine for ``url``; SQLite gets foreign keys, WAL and a busy timeout for concurrent runs."""
    url = database_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):  # pragma: no cover - trivial
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


@contextmanager
def engine_scope(url: str | None = None) -> Iterator[Engine]:
    """An engine for one unit of work, its connections closed when the block ends."""
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()
