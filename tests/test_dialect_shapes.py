"""Dialects that answer reflection in other shapes, or wrap column types, still scan correctly.

The shapes here are the ones third-party dialects give: PyHive (Spark SQL, Hive) returns a list
for the primary key and raises NotImplementedError for unique constraints; clickhouse-sqlalchemy
returns an empty dict; PyHive reflects Hive's timestamp as a TypeDecorator over TIMESTAMP, and
clickhouse-sqlalchemy wraps nullable columns in Nullable(...).
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, TypeDecorator
from sqlalchemy.dialects import postgresql
from sqlalchemy.types import TypeEngine

from biasaudit.db.sources import cells
from biasaudit.db.sources.catalogue import table_problems
from biasaudit.db.sources.engines import base, engine_for
from biasaudit.db.sources.scan import pushdown_cells
from biasaudit.db.sources.window import Window
from biasaudit.schemas.config import parse_config

AUDIT = parse_config(
    {"audits": [{"name": "a", "model": "m", "source": "src", "attributes": ["grp"]}]}
).audits[0]
COLUMNS = {
    "prediction_id": String(20),
    "model_id": String(20),
    "predicted_at": DateTime(),
    "y_true": Integer(),
    "y_pred": Integer(),
    "grp": String(10),
}


def source(**types) -> Table:
    """The audit's source table, with the column types given here instead of the usual ones."""
    return Table("src", MetaData(), *[Column(n, types.get(n, t)) for n, t in COLUMNS.items()])


TABLE = source()


def unsupported(*_args, **_kwargs):
    raise NotImplementedError


class FakeInspector:
    """An inspector answering each reflection call with a fixed value (or raising it)."""

    def __init__(self, pk, unique, indexes):
        self.answers = {"pk": pk, "unique": unique, "indexes": indexes}

    def _answer(self, name):
        answer = self.answers[name]
        return answer() if callable(answer) else answer

    def get_pk_constraint(self, name, schema=None):
        return self._answer("pk")

    def get_unique_constraints(self, name, schema=None):
        return self._answer("unique")

    def get_indexes(self, name, schema=None):
        return self._answer("indexes")


SHAPES = {
    "pyhive": FakeInspector(
        [], unsupported, [{"name": "partition", "column_names": ["day"], "unique": False}]
    ),
    "clickhouse": FakeInspector({}, unsupported, []),
    "nothing reflected": FakeInspector(unsupported, unsupported, unsupported),
    "odd entries": FakeInspector(
        {"constrained_columns": None}, [None, {"column_names": "prediction_id"}], [{}]
    ),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_reflection_in_another_shape_means_no_known_key(monkeypatch, shape):
    """It treats a primary key reflected as a list, a NotImplementedError, or entries without
    column lists as "no unique key known" (the duplicate scan runs), instead of failing."""
    monkeypatch.setattr(base, "inspect", lambda _connection: SHAPES[shape])
    connection = SimpleNamespace(dialect=SimpleNamespace(name="other"))
    assert cells.ids_are_unique(connection, TABLE, AUDIT) is False


def test_reflected_unique_key_is_still_found(monkeypatch):
    """It still finds a key among well-shaped answers when another call is unsupported."""
    inspector = FakeInspector(
        unsupported, [{"column_names": ["model_id", "prediction_id"]}], unsupported
    )
    monkeypatch.setattr(base, "inspect", lambda _connection: inspector)
    connection = SimpleNamespace(dialect=SimpleNamespace(name="other"))
    assert cells.ids_are_unique(connection, TABLE, AUDIT) is True


class TextTimestamp(TypeDecorator):
    """Like PyHive's HiveTimestamp: a TypeDecorator whose values are timestamps."""

    impl = DateTime
    cache_ok = True


class Nullable(TypeEngine):
    """Like clickhouse-sqlalchemy's Nullable: a wrapper holding the type as ``nested_type``."""

    def __init__(self, nested_type):
        self.nested_type = nested_type


def test_a_decorated_timestamp_is_a_timestamp():
    """It reads a timestamp column whose type is a TypeDecorator over DateTime as the column
    itself (not NULL, which would make every row suspect), and accepts it as a timestamp."""
    table = source(predicted_at=TextTimestamp())
    assert engine_for("postgresql").parsed_timestamp(table.c.predicted_at) is table.c.predicted_at
    assert table_problems(table, AUDIT, engine_for("postgresql")) == []
    window = Window(table, AUDIT, engine_for("postgresql"))
    end = datetime(2026, 6, 1, tzinfo=UTC)
    compiled = window.where(None, end, end).compile(dialect=postgresql.dialect())
    assert "src.predicted_at <=" in str(compiled)


def test_a_wrapped_number_and_text_keep_their_kind():
    """It casts a Nullable(Integer) score as a number and reads a Nullable(String) id as text."""
    score = Column("score", Nullable(Integer()))
    compiled = str(
        engine_for("postgresql").parsed_number(score).compile(dialect=postgresql.dialect())
    )
    assert compiled.startswith("CAST(score AS DOUBLE PRECISION)")
    table = source(prediction_id=Nullable(String()))
    assert table_problems(table, AUDIT, engine_for("postgresql")) == []


def test_declared_unique_ids_skip_the_duplicate_scan(tmp_path):
    """With ``scan.ids_unique`` the push-down runs no duplicate-id scan (the user's word, kept in
    the audit's configuration, so in its hash and stored run): a table without a key that does
    repeat an id then counts it twice; undeclared, the repeat is quarantined."""
    from sqlalchemy import event

    from biasaudit.db.engine import make_engine

    engine = make_engine(f"sqlite:///{tmp_path / 's.db'}")
    source().create(engine)
    rows = [
        ("a", "2026-05-01 10:00:00"),
        ("a", "2026-05-02 10:00:00"),
        ("b", "2026-05-03 10:00:00"),
    ]
    with engine.begin() as connection:
        connection.execute(
            TABLE.insert(),
            [
                {
                    "prediction_id": p,
                    "model_id": "m",
                    "predicted_at": datetime.fromisoformat(t),
                    "y_true": 1,
                    "y_pred": 0,
                    "grp": "A",
                }
                for p, t in rows
            ],
        )
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    now = datetime(2026, 6, 1, tzinfo=UTC)
    declared = AUDIT.model_copy(update={"scan": AUDIT.scan.model_copy(update={"ids_unique": True})})
    assert declared.config_hash() != AUDIT.config_hash()
    trusted = pushdown_cells(engine, declared, None, now, now)
    assert trusted.rows_valid == 3 and trusted.quarantine.empty
    assert not [s for s in statements if "HAVING" in s]
    checked = pushdown_cells(engine, AUDIT, None, now, now)
    assert checked.rows_valid == 2 and list(checked.quarantine["rule"]) == ["field_uniqueness"]
    assert [s for s in statements if "HAVING" in s]
    engine.dispose()


@pytest.mark.parametrize("dialect", ["clickhouse", "hive"])
def test_text_timestamps_on_engines_without_text_parsing_are_one_clear_line(dialect):
    """It refuses a text timestamp on ClickHouse and Spark (whose SQL here parses no text) before
    any row is read, in one line naming the column and what is accepted there; elsewhere text is
    accepted."""
    table = source(predicted_at=String(40))
    assert table_problems(table, AUDIT, engine_for("postgresql")) == []
    [problem] = table_problems(table, AUDIT, engine_for(dialect))
    assert "column 'predicted_at' (predicted_at) is of type String" in problem
    assert "read from a timestamp column on " in problem
