"""A scan reads one snapshot (db.engine.one_snapshot): rows another session inserts, and labels it
updates, while a scan runs change nothing the scan reports. Push-down and stream mode read the
window in several statements (duplicate ids, the GROUP BY, the suspect rows; on PostgreSQL the
stream's rows on a second connection), so without one snapshot a late label arriving between two
of them lost a row or counted it twice. Tested on SQLite, PostgreSQL, MariaDB and DuckDB against
memory mode's reading of the table before the writes (one statement).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, event, update

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.engines import postgresql
from biasaudit.db.sources.scan import memory_cells, pushdown_cells, stream_cells
from tests.test_typed_sources import audit_of, create, same_cells

NOW = datetime(2026, 6, 1, tzinfo=UTC)
AUDIT = audit_of(
    columns={"prediction_id": "pid", "predicted_at": "made_at", "y_true": "label", "y_pred": "pred"},
    attributes=["grp"],
)


def table_and_rows(aware: bool) -> tuple[Table, list[dict]]:
    """60 rows, no key on the id (so the duplicate scan runs): one id twice (the second
    quarantined), one invalid label."""
    table = Table(
        "src",
        MetaData(),
        Column("pid", String(40)),
        Column("model", String(10)),
        Column("made_at", DateTime(timezone=aware)),
        Column("label", Integer),
        Column("pred", Integer),
        Column("grp", String(10)),
    )
    moment = NOW - timedelta(days=1)
    rows = [
        {
            "pid": f"p{i:03d}",
            "model": "m",
            "made_at": moment if aware else moment.replace(tzinfo=None),
            "label": i % 2,
            "pred": (i // 2) % 2,
            "grp": "abc"[i % 3],
        }
        for i in range(60)
    ]
    rows[1]["pid"] = rows[0]["pid"]  # a repeated id
    rows[2]["label"] = 7  # not a binary label: quarantined
    return table, rows


@contextmanager
def writes_between_reads(engine, table: Table, new_row: dict) -> Iterator[list[str]]:
    """After each of the scan's first two reads of the table, another session commits a change:
    first a new row repeating an id and the invalid label made valid; then a valid label made
    invalid and a new row (the stream's Arrow readers, PostgreSQL's and DuckDB's, pass no
    statement through SQLAlchemy: there only the first). Returns the statements after which a
    change was committed; the changes stop with the block."""
    changes = [
        [
            table.insert().values({**new_row, "pid": "p010"}),
            update(table).where(table.c.pid == "p002").values(label=1),
        ],
        [
            update(table).where(table.c.pid == "p020").values(label=5),
            table.insert().values({**new_row, "pid": "late"}),
        ],
    ]
    after: list[str] = []

    def commit_a_change(conn, cursor, statement, parameters, context, executemany):
        reads = statement.lstrip().upper().startswith("SELECT") and "src" in statement
        if reads and changes and "information_schema" not in statement:
            after.append(statement)
            with engine.begin() as other:
                for change in changes.pop(0):
                    other.execute(change)

    event.listen(engine, "after_cursor_execute", commit_a_change)
    try:
        yield after
    finally:
        event.remove(engine, "after_cursor_execute", commit_a_change)


def snapshot_engine(url: str):
    """An engine on ``url``; MariaDB through its own dialect name, its sessions at READ COMMITTED
    (a common server default, under which each statement would read its own snapshot)."""
    if not url.startswith("mysql"):
        return make_engine(url)
    engine = make_engine(url.replace("mysql+pymysql", "mariadb+pymysql", 1))

    @event.listens_for(engine, "connect")
    def read_committed(dbapi_connection, _record):
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")

    return engine


@pytest.mark.parametrize("mode", ["pushdown", "stream"])
def test_writes_during_a_scan_do_not_reach_it(source_db_url, mode):
    """Every count, cell and quarantined row is the table's as it was when the scan began; the
    engine writes as before once the scan is over."""
    engine = snapshot_engine(source_db_url)
    aware = engine.dialect.name in {"postgresql", "duckdb"}
    table, rows = table_and_rows(aware)
    create(engine, table, rows)
    before = memory_cells(engine, AUDIT, None, NOW, NOW)
    assert (before.rows_read, before.rows_valid, len(before.quarantine)) == (60, 58, 2)
    with writes_between_reads(engine, table, rows[5]) as after:
        if mode == "pushdown":
            scanned = pushdown_cells(engine, AUDIT, None, NOW, NOW)
        else:
            scanned = stream_cells(engine, AUDIT, None, NOW, NOW, chunk_rows=16)
    assert after, "no change was committed during the scan"
    assert (scanned.rows_read, scanned.rows_valid) == (before.rows_read, before.rows_valid)
    same_cells(scanned.cells, before.cells)
    columns = ["row_ref", "column_name", "value", "rule"]
    got = scanned.quarantine[columns].sort_values(columns).reset_index(drop=True)
    expected = before.quarantine[columns].sort_values(columns).reset_index(drop=True)
    assert got.astype(str).equals(expected.astype(str)), (got, expected)
    with engine.begin() as connection:  # the scan's connection, back in the pool, can write
        connection.execute(table.insert().values({**rows[5], "pid": "after"}))
    now = memory_cells(engine, AUDIT, None, NOW, NOW)
    assert now.rows_read == 60 + len(after) + 1  # each change added a row a later scan reads


@pytest.mark.parametrize("source_db_url", ["postgresql"], indirect=True)
def test_a_reader_that_cannot_import_the_snapshot_reads_on_the_scans_connection(
    source_db_url, monkeypatch, caplog
):
    """Where ADBC's connection cannot take the scan's snapshot (another server behind the URL),
    the stream reads on the scan's own connection, in its snapshot, and says so."""
    monkeypatch.setattr(postgresql, "_exported_snapshot", lambda connection: "00000003-0000001A-1")
    engine = make_engine(source_db_url)
    table, rows = table_and_rows(aware=True)
    create(engine, table, rows)
    before = memory_cells(engine, AUDIT, None, NOW, NOW)
    with writes_between_reads(engine, table, rows[5]) as after:
        scanned = stream_cells(engine, AUDIT, None, NOW, NOW, chunk_rows=16)
    assert len(after) == 2  # both reads went through SQLAlchemy: the cursor, not ADBC
    assert (scanned.rows_read, scanned.rows_valid) == (before.rows_read, before.rows_valid)
    same_cells(scanned.cells, before.cells)
    assert "reading through the scan's connection" in caplog.text
