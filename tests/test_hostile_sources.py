"""Property: on hostile tables of random column types and values, every engine's three scan modes
accept and quarantine the same rows, and read = accepted + quarantined.

Hypothesis draws a column type for each canonical column and hostile values for each row (case
and space variants, numbers as text, impossible dates, epochs, zones, NULLs, repeated ids); the
table is rebuilt per example on the engine of the parameter (SQLite, PostgreSQL, MariaDB, DuckDB).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Table,
)

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.scan import (
    EmptyWindow,
    memory_cells,
    pushdown_cells,
    stream_cells,
    valid_cells,
    windows_cells,
)
from biasaudit.schemas.config import parse_config
from tests.clusters import source_table

NOW = datetime(2026, 6, 1, tzinfo=UTC)

POOLS = {
    "text_id": ["a", "A", "a ", " ", "", "007", "7", None, "ü", "x\ty"],
    "int_id": [1, 2, 7, -1, None],
    "int_label": [0, 1, 2, -1, None],
    "text_label": ["0", "1", " 1", "1.0", "true", "yes", "no", "", None, "01", "1 "],
    "bool_label": [True, False, None],
    "text_time": [
        "2026-05-10T10:00:00Z",
        "2026-05-10 10:00",
        "2026-05-10",
        "2024-02-29T12:00:00+14:00",
        "2026-02-29",
        "2026-05-31T23:59:59.999999+00:00",
        "2026-05-10T10:00:00.0004Z",
        "2026-05-10 10:00:00.0006",
        "2026-05-31 23:59:59.9995",
        "2026-06-01T01:00:00+02:00",
        "2026-05-10t10:00",
        "soon",
        "",
        "1700000000",
        "1850-01-01",
        "2030-01-01",
        None,
    ],
    "time": [
        datetime(2026, 5, 10, 10, 0),
        datetime(2026, 5, 31, 23, 59, 59, 999999),
        datetime(2026, 5, 10, 10, 0, 0, 400),
        datetime(2026, 5, 31, 23, 59, 59, 999500),
        datetime(1850, 1, 1),
        datetime(2030, 1, 1),
        None,
    ],
    "text_attr": ["A", "a", "A ", " ", "", None, "1", "1.0", "x.y", "Ä"],
    "int_attr": [1, -1, 0, None, 10],
    "float_score": [0.0, 0.5, 1.0, 1.5, 1.7, -0.1, None],
    "text_score": ["0.5", "abc", ".5", "1e-1", None, "1", " 0.2", "1.7"],
}
TYPES = {
    "text_id": String(20),
    "int_id": BigInteger(),
    "int_label": Integer(),
    "text_label": String(10),
    "bool_label": Boolean(),
    "text_time": String(40),
    "time": DateTime(),
    "text_attr": String(10),
    "int_attr": Integer(),
    "float_score": Float(),
    "text_score": String(10),
}
CHOICES = {
    "pid": ["text_id", "int_id"],
    "label": ["int_label", "text_label", "bool_label"],
    "pred": ["int_label", "text_label", "bool_label"],
    "made": ["text_time", "time"],
    "grp": ["text_attr", "int_attr"],
    "score": ["float_score", "text_score", None],
}


# On ClickHouse and Spark the audit reads typed timestamps and scores (text ones are parsed with
# SQL those engines do not speak: README, "When one machine is not enough").
ENGINE_CHOICES = {
    **CHOICES,
    "made": ["time"],
    "score": ["float_score", None],
}


@st.composite
def hostile_tables(draw, choices=CHOICES):
    kinds = {column: draw(st.sampled_from(options)) for column, options in choices.items()}
    n = draw(st.integers(1, 25))
    rows = [
        {c: draw(st.sampled_from(POOLS[k])) for c, k in kinds.items() if k is not None}
        for _ in range(n)
    ]
    return kinds, rows


AUDIT = {
    "name": "h",
    "model": "m",
    "source": "hostile",
    "attributes": ["grp"],
    "columns": {
        "prediction_id": "pid",
        "predicted_at": "made",
        "y_true": "label",
        "y_pred": "pred",
    },
}


def records(scanned) -> list[tuple]:
    """(row reference, column, rule) of each quarantine record; a row without an id is named by
    its position in what was read, which differs by mode, so only as ``<row>``."""
    q = scanned.quarantine
    refs = q["row_ref"].astype(str).str.replace(r"^<row \d+>$", "<row>", regex=True)
    return sorted(zip(refs, q["column_name"].astype(str), q["rule"]))


@settings(
    max_examples=int(os.environ.get("BIASAUDIT_HYPOTHESIS_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(table=hostile_tables())
def test_hostile_tables_modes_agree_and_balance(source_db_url, table):
    """It accepts and quarantines the same rows in memory, stream and push-down modes, and every
    row read is either accepted or quarantined, whatever the column types and values."""
    modes_agree_and_balance(source_db_url, table)


# Windows of a backtest: from the beginning, nights in May 2026 whose ends fall on rows (to the
# microsecond, where SQLite compares milliseconds), one ending after the rows' future
# ("2030-01-01" is later than NOW plus the clock skew); and the same with no window from the
# beginning (the union read then has a start).
MAY = [datetime(2026, 5, 1, tzinfo=UTC), datetime(2026, 5, 10, 10, tzinfo=UTC)]
MAY += [datetime(2026, 5, 10, 10, 0, 0, 400, tzinfo=UTC), datetime(2026, 5, 31, 23, 59, 59, 999500, tzinfo=UTC)]
WINDOWS = [(None, MAY[0]), (MAY[0], MAY[1]), (MAY[1], MAY[2]), (MAY[2], MAY[3]), (MAY[3], NOW)]
WINDOWS += [(None, NOW), (MAY[1], datetime(2031, 1, 1, tzinfo=UTC))]
STARTED = [w for w in WINDOWS if w[0] is not None]


@settings(
    max_examples=int(os.environ.get("BIASAUDIT_HYPOTHESIS_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(table=hostile_tables())
def test_windows_read_once_are_the_windows_scanned_one_by_one(source_db_url, table):
    """windows_cells (the backtest's one read) gives each window the cells its own scan gives,
    whatever the column types and values: rows on a window's ends, without a plausible
    timestamp, in the future or repeated."""
    kinds, rows = table
    engine = make_engine(source_db_url)
    columns = [Column(c, TYPES[k]) for c, k in kinds.items() if k is not None]
    source_table(engine, Table("hostile", MetaData(), *columns), rows)
    audit = parse_config({"audits": [AUDIT]}).audits[0]
    try:
        for windows in (WINDOWS, STARTED):
            once = windows_cells(engine, audit, windows, NOW)
            each = [valid_cells(engine, audit, start, end, NOW) for start, end in windows]
            for window, read, scanned in zip(windows, once, each):
                pd.testing.assert_frame_equal(
                    read.reset_index(drop=True), scanned.reset_index(drop=True), obj=str(window)
                )
    finally:
        engine.dispose()


# Fewer examples on the distributed engines: every statement is a distributed job there (a
# Spark example takes about 30 s).
@settings(
    max_examples=int(os.environ.get("BIASAUDIT_ENGINE_HYPOTHESIS_EXAMPLES", "3")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(table=hostile_tables(ENGINE_CHOICES))
def test_hostile_tables_modes_agree_and_balance_on_distributed_engines(engine_url, table):
    """The same on ClickHouse (two shards behind a Distributed table) and Spark SQL. Rows of a
    repeated id are made equal: these engines return rows in no fixed order, so which of two
    different rows of one id is read first (and kept) may change from one read to the next."""
    kinds, rows = table
    first: dict = {}
    rows = [first.setdefault(row["pid"], row) if row["pid"] is not None else row for row in rows]
    modes_agree_and_balance(engine_url, (kinds, rows))


def modes_agree_and_balance(url: str, table):
    kinds, rows = table
    engine = make_engine(url)
    columns = [Column(c, TYPES[k]) for c, k in kinds.items() if k is not None]
    source_table(engine, Table("hostile", MetaData(), *columns), rows)
    columns_map = dict(AUDIT["columns"])
    audit = parse_config({"audits": [{**AUDIT, "columns": columns_map}]}).audits[0]
    try:
        scans = {
            "memory": memory_cells(engine, audit, None, NOW, NOW),
            "stream": stream_cells(engine, audit, None, NOW, NOW, chunk_rows=1000),
            "pushdown": pushdown_cells(engine, audit, None, NOW, NOW),
        }
    except EmptyWindow:  # every row after the window's end: nothing to compare
        return
    finally:
        engine.dispose()
    memory = scans["memory"]
    assert scans["stream"].fingerprint == memory.fingerprint  # the same input, read alike
    for mode, scanned in scans.items():
        quarantined_rows = scanned.quarantine["row_number"].nunique()
        assert scanned.rows_read == scanned.rows_valid + quarantined_rows, mode
        assert scanned.rows_read == memory.rows_read, mode
        assert scanned.rows_valid == memory.rows_valid, mode
        assert scanned.rows_unlabelled == memory.rows_unlabelled, mode
        assert records(scanned) == records(memory), mode
        pd.testing.assert_frame_equal(
            scanned.cells.reset_index(drop=True), memory.cells.reset_index(drop=True)
        )
    # Nothing is lost: rows not read are exactly those after the window's end.
    assert memory.rows_read <= len(rows)


def test_property_test_is_not_vacuous(tmp_path):
    """It meets invalid rows of every kind: the pools make quarantine happen (a fixed table from
    the pools quarantines rows for ids, labels, timestamps, attributes and scores)."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    engine = make_engine(url)
    hostile = Table(
        "hostile",
        MetaData(),
        Column("pid", String(20)),
        Column("made", String(40)),
        Column("label", String(10)),
        Column("pred", String(10)),
        Column("grp", String(10)),
        Column("score", String(10)),
    )
    hostile.create(engine)
    rows = [
        {"pid": p, "made": t, "label": y, "pred": "1", "grp": g, "score": s}
        for p, t, y, g, s in [
            ("a", "2026-05-10", "1", "A", "0.5"),
            (" ", "2026-05-10", "1", "A", None),
            ("b", "soon", "1", "A", None),
            ("c", "2026-05-10", "yes", "A", None),
            ("d", "2026-05-10", "1", " ", None),
            ("e", "2026-05-10", "1", "A", "abc"),
            ("a", "2026-05-10", "1", "A", None),
        ]
    ]
    with engine.begin() as connection:
        connection.execute(hostile.insert(), rows)
    audit = parse_config({"audits": [AUDIT]}).audits[0]
    scanned = pushdown_cells(engine, audit, None, NOW, NOW)
    assert scanned.rows_valid == 1
    assert set(scanned.quarantine["column_name"]) == {
        "prediction_id",
        "predicted_at",
        "y_true",
        "grp",
        "score",
    }
    engine.dispose()
