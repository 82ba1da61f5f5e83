"""The push-down reads a clean typed table once: the per-row rules are a conditional
sum inside the GROUP BY, rules the catalogue guarantees are left out, and rows are read again only
when one is suspect, on SQLite, PostgreSQL, MariaDB and DuckDB; a scored scan of a clean table
fetches counts, never its rows (SQLite, counted at the cursor).

Expected cells are counted here from the generated Python values, never by the code under test.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import Column, DateTime, Float, Integer, MetaData, String, Table, event

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.pushdown import PUSHDOWN_RULES
from biasaudit.db.sources.scan import memory_cells, pushdown_cells
from biasaudit.schemas.frames import predictions_schema
from tests.test_typed_sources import audit_of, create, expected_cells, same_cells

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def table_and_rows(dialect: str, n: int = 400):
    """A production-like table: text id as primary key, zoned timestamps, a REAL score."""
    aware = dialect in {"postgresql", "duckdb"}
    rng = np.random.default_rng(7)
    table = Table(
        "src",
        MetaData(),
        Column("pid", String(40), primary_key=True),
        Column("model", String(10)),
        Column("made_at", DateTime(timezone=aware)),
        Column("label", Integer),
        Column("pred", Integer),
        Column("score", Float),
        Column("grp", String(10)),
    )
    rows = []
    for i in range(n):
        moment = NOW - timedelta(hours=float(rng.uniform(1, 2000)))
        rows.append(
            {
                "pid": f"p{i:05d}",
                "model": "m",
                "made_at": moment if aware else moment.replace(tzinfo=None),
                "label": int(rng.random() < 0.4),
                "pred": int(rng.random() < 0.5),
                "score": float(rng.random()),
                "grp": str(rng.choice(["a", "b", "c"])),
            }
        )
    return table, rows


def source_reads(engine) -> list[str]:
    """Statements of the scan that read the source table (catalogue queries excluded)."""
    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if "FROM src" in statement or 'FROM "src"' in statement or "FROM `src`" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    return seen


AUDIT = audit_of(
    columns={
        "prediction_id": "pid",
        "predicted_at": "made_at",
        "y_true": "label",
        "y_pred": "pred",
    },
    attributes=["grp"],
    scan={"mode": "pushdown"},
)


def test_clean_typed_table_is_read_once(source_db_url):
    """It counts a clean table with a text key, zoned timestamps and a REAL score in one
    statement, with the cells of the generated values and nothing quarantined."""
    engine = make_engine(source_db_url)
    table, rows = table_and_rows(engine.dialect.name)
    create(engine, table, rows)
    reads = source_reads(engine)
    scanned = pushdown_cells(engine, AUDIT, None, NOW, NOW)
    assert len(reads) == 1, reads
    assert "GROUP BY" in reads[0]
    frame = pd.DataFrame(rows).rename(columns={"label": "y_true", "pred": "y_pred"})
    same_cells(scanned.cells, expected_cells(frame, ["grp"]))
    assert scanned.rows_read == scanned.rows_valid == len(rows)
    assert scanned.quarantine.empty


@pytest.mark.parametrize(
    "change, quarantined",
    [
        ({"pid": "   "}, 1),  # only spaces: sorts before '!', fetched, quarantined
        ({"pid": "\tp"}, 0),  # sorts before '!' too, but holds more than spaces: accepted
        ({"score": 1.5}, 1),
        ({"made_at": None}, 1),
        ({"made_at": datetime(1850, 1, 1)}, 1),
        ({"made_at": NOW + timedelta(days=3)}, 1),  # in the future: read and quarantined
        ({"made_at": NOW + timedelta(minutes=3)}, None),  # after the end, not future: not read
    ],
)
def test_suspect_rows_are_read_again_and_judged_like_memory(source_db_url, change, quarantined):
    """A row that a per-row rule does not clear is read again and judged by the Pandera schema:
    push-down and memory mode accept and quarantine the same rows."""
    engine = make_engine(source_db_url)
    table, rows = table_and_rows(engine.dialect.name, n=60)
    value = change.get("made_at", ...)
    if isinstance(value, datetime) and engine.dialect.name in {"postgresql", "duckdb"}:
        change = {"made_at": value.replace(tzinfo=UTC) if value.tzinfo is None else value}
    elif isinstance(value, datetime):
        change = {"made_at": value.replace(tzinfo=None)}
    rows[3] = {**rows[3], **change}
    create(engine, table, rows)
    reads = source_reads(engine)
    pushed = pushdown_cells(engine, AUDIT, None, NOW, NOW)
    pushdown_reads = len(reads)
    memory = memory_cells(engine, AUDIT, None, NOW, NOW)
    assert (pushed.rows_read, pushed.rows_valid) == (memory.rows_read, memory.rows_valid)
    same_cells(pushed.cells, memory.cells)
    assert len(pushed.quarantine) == len(memory.quarantine)
    if quarantined is None:  # outside the window: one pass, and one row fewer read
        assert pushed.rows_read == len(rows) - 1
        assert pushdown_reads == 1, reads
    else:
        assert len(pushed.quarantine) == quarantined
        assert pushed.rows_read == len(rows)
        assert pushdown_reads == 2, reads  # the GROUP BY, then the suspect rows


@pytest.mark.parametrize("decision", [False, True])
def test_every_schema_rule_has_its_place_in_the_pushdown(decision):
    """Each rule of the Pandera predictions schema (the one judge) is enforced somewhere by the
    push-down (PUSHDOWN_RULES), and nothing is listed that the schema does not have."""
    schema = predictions_schema(["grp"], decision=decision)
    rules = {}
    for name, column in schema.columns.items():
        names = {check.name for check in column.checks}
        names |= {"not_nullable"} if not column.nullable else set()
        names |= {"field_uniqueness"} if column.unique else set()
        if names:
            rules["attribute" if name == "grp" else name] = names
    listed = {c: set(r) for c, r in PUSHDOWN_RULES.items() if c in rules}
    assert listed == rules
    assert set(PUSHDOWN_RULES) - set(rules) == {"decision_score" if not decision else "y_pred"}


FETCHED: list[list] = []  # [statement, rows fetched] of every counting cursor


class _CountingCursor(sqlite3.Cursor):
    """A SQLite cursor that records each statement it runs and the rows fetched from it."""

    def execute(self, sql, parameters=(), /):
        FETCHED.append([sql, 0])
        self._entry = FETCHED[-1]
        return super().execute(sql, parameters)

    def _count(self, rows: list) -> list:
        self._entry[1] += len(rows)
        return rows

    def fetchone(self):
        row = super().fetchone()
        return row if row is None else self._count([row])[0]

    def fetchmany(self, size=None):
        return self._count(super().fetchmany(self.arraysize if size is None else size))

    def fetchall(self):
        return self._count(super().fetchall())

    def __next__(self):
        return self._count([super().__next__()])[0]


class _CountingConnection(sqlite3.Connection):
    def cursor(self, factory=_CountingCursor):
        return super().cursor(factory)


@pytest.mark.parametrize("values", [10, None])
def test_scored_pushdown_never_fetches_prediction_rows(tmp_path, values):
    """On a clean scored SQLite table of 5,000 rows, every statement of the push-down returns at
    most one row per (group, score value, label, decision) for a score of 10 values, and all
    together far fewer rows than the table holds; for a continuous score at most one row per
    (group, score cell, label, decision), cells of 1/4096 of a decile bin (40,960 per group,
    label and decision, whatever the table's size). The memory scan, counted the same way,
    fetches every row (the counter sees rows)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'src.db'}")

    @event.listens_for(engine, "do_connect")
    def _counting(dialect, record, cargs, cparams):
        return sqlite3.connect(*cargs, **cparams, factory=_CountingConnection)

    table, rows = table_and_rows("sqlite", n=5000)
    if values:
        rows = [{**row, "score": (int(row["score"] * values) + 0.5) / values} for row in rows]
    create(engine, table, rows)
    audit = audit_of(
        columns={"prediction_id": "pid", "predicted_at": "made_at", "y_true": "label"},
        attributes=["grp"],
        decision={"score": "score", "threshold": 0.5},
        scan={"mode": "pushdown"},
    )
    fetched = FETCHED
    fetched.clear()
    scanned = pushdown_cells(engine, audit, None, NOW, NOW)
    assert scanned.rows_valid == len(rows) and scanned.quarantine.empty  # no re-read of rows
    counted = scanned.score_counts[["positives", "negatives", "unlabelled"]].to_numpy().sum()
    assert counted == len(rows)  # every row is in the score counts, none was fetched
    if values:
        cells = 3 * 10 * 2 * 2  # groups x score values x labels x decisions
        assert max(n for _, n in fetched) <= cells, fetched
        assert sum(n for _, n in fetched) < len(rows) / 10, fetched
    else:  # one row per distinct (group, cell, label, decision), cells computed here
        frame = pd.DataFrame(rows)
        scores = frame["score"].to_numpy()
        edges = np.unique(
            np.sort(scores)[np.floor(np.arange(10) / 10 * (len(scores) - 1)).astype(int)]
        )
        upper = np.append(edges[1:], scores.max())
        k = np.searchsorted(edges, scores, side="right") - 1
        cell = np.floor((scores - edges[k]) / ((upper[k] - edges[k]) / 4096))
        keys = frame.assign(k=k, cell=cell, chosen=scores >= 0.5)[
            ["grp", "k", "cell", "label", "chosen"]
        ]
        assert max(n for _, n in fetched) == len(keys.drop_duplicates()), fetched
    fetched.clear()
    memory_cells(engine, audit, None, NOW, NOW)
    assert max(n for _, n in fetched) >= len(rows)
    engine.dispose()
