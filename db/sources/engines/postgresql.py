"""PostgreSQL: the standard's casts and time zones; stream mode reads through ADBC's binary COPY."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, OperationalError

from biasaudit.db.engine import answer_deadline, libpq_options
from biasaudit.db.sources.engines.base import (
    SourceEngine,
    compiled,
    epoch_seconds,
    iso_cast_in_utc,
)

SNAPSHOT_ID = re.compile(r"[0-9A-F]+-[0-9A-F]+-[0-9]+")  # pg_export_snapshot's form
log = logging.getLogger(__name__)


class PostgreSQL(SourceEngine):
    """PostgreSQL through psycopg 3 (and ADBC, where installed, for stream mode)."""

    name, label = "postgresql", "PostgreSQL"
    bytewise_collation = "C"
    position = "strpos"

    def iso_moment(self, text):
        return iso_cast_in_utc(self, text)

    def seconds_between(self, later, earlier):
        return epoch_seconds(later, earlier)

    def arrow_batches(self, connection: Connection, query, chunk_rows: int):
        return _copy_batches(connection, query), answer_deadline()


def _exported_snapshot(connection: Connection) -> str:
    """The snapshot of the scan's transaction (db.engine.one_snapshot), for another session."""
    return connection.exec_driver_sql("SELECT pg_export_snapshot()").scalar_one()


def _copy_batches(connection: Connection, query) -> Iterator[pa.RecordBatch] | None:
    """The query's rows through ADBC's binary COPY, in the scan's snapshot; None without the
    driver, or where ADBC's connection cannot import the snapshot (another server behind the
    same URL: a multi-host URL, a pool across replicas): then the caller reads on the scan's
    own connection."""
    try:
        import adbc_driver_postgresql.dbapi as adbc
    except ImportError:
        return None
    import psycopg

    # COPY takes no parameters: psycopg itself quotes the values into the statement.
    statement = compiled(connection, query)
    driver: Any = connection.connection.driver_connection
    sql = psycopg.ClientCursor(driver).mogrify(str(statement), statement.params)
    # The engine's limits (db.engine), so that a silent server fails the scan instead of hanging
    # it.
    url = connection.engine.url.set(drivername="postgresql").update_query_dict(
        {name: str(value) for name, value in libpq_options().items()}
    )
    snapshot = _exported_snapshot(connection)
    if not SNAPSHOT_ID.fullmatch(snapshot):
        log.warning("stream scan: unexpected snapshot id; reading through the scan's connection")
        return None
    try:
        conn = adbc.connect(url.render_as_string(hide_password=False))
    except adbc.Error as error:  # as SQLAlchemy's own: db.retry retries a drop or timeout
        raise DBAPIError.instance(str(statement), None, error, adbc.Error) from error
    cursor = conn.cursor()
    try:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cursor.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
    except adbc.Error as error:
        cursor.close()
        conn.close()
        log.warning("stream scan: %s; reading through the scan's connection", error)
        return None

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            with conn, cursor:
                cursor.execute(sql)
                yield from map(_reals_as_psycopg, cursor.fetch_record_batch())
        except adbc.Error as error:  # as SQLAlchemy's own: db.retry retries a drop or timeout
            raise DBAPIError.instance(str(statement), None, error, adbc.Error) from error
        except OSError as error:  # a failure mid-stream arrives through Arrow as an IO error
            raise OperationalError(str(statement), None, error) from error

    return batches()


def _reals_as_psycopg(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its float4 (real) columns as psycopg reads them, from their shortest
    decimal text (0.1, not 0.10000000149011612), so that values, quarantine records and
    fingerprints equal the memory mode's."""
    columns = [
        column.cast(pa.string()).cast(pa.float64()) if column.type == pa.float32() else column
        for column in batch.columns
    ]
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)
