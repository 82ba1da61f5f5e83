"""Each source engine has its module (db.sources.engines); an engine biasaudit has no module for
gets the generic one, which reads what it can read safely and refuses the rest in one line naming
the engine."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pytest
from sqlalchemy import JSON, Column, DateTime, Integer, MetaData, String, Table

from biasaudit.db.engine import make_engine
from biasaudit.db.sources import engines
from biasaudit.db.sources.catalogue import SourceError, table_problems
from biasaudit.db.sources.engines import ENGINES, engine_for
from biasaudit.db.sources.engines.duckdb import DuckDB
from biasaudit.db.sources.engines.generic import Generic
from biasaudit.db.sources.scan import scan_window
from biasaudit.schemas.config import parse_config

AUDIT = parse_config(
    {"audits": [{"name": "a", "model": "m", "source": "src", "attributes": ["grp"]}]}
).audits[0]
COLUMNS = {
    "prediction_id": Integer(),
    "model_id": String(20),
    "predicted_at": DateTime(),
    "y_true": Integer(),
    "y_pred": Integer(),
    "grp": String(10),
}


def source(**types) -> Table:
    """The audit's source table, with the column types given here instead of the usual ones."""
    columns = {**COLUMNS, **types}
    return Table("src", MetaData(), *[Column(n, t) for n, t in columns.items() if t is not None])


def with_mode(mode: str):
    return AUDIT.model_copy(update={"scan": AUDIT.scan.model_copy(update={"mode": mode})})


def test_every_dialect_the_sources_know_has_its_module_and_others_the_generic_one():
    modules = {name: type(engine).__module__.rsplit(".", 1)[-1] for name, engine in ENGINES.items()}
    assert modules == {
        "sqlite": "sqlite",
        "postgresql": "postgresql",
        "mysql": "mysql",
        "mariadb": "mysql",
        "duckdb": "duckdb",
        "clickhouse": "clickhouse",
        "hive": "spark",
    }
    trino = engine_for("trino")
    assert isinstance(trino, Generic) and trino.name == "trino" and "trino" in trino.label


def test_the_generic_engine_reads_typed_columns_in_memory_and_stream_modes():
    """A table of typed columns in memory or stream mode has nothing to refuse, a labelled_at
    column and an attribute mapped to a column of another name (beside a JSON column) among
    them."""
    for mode in ("memory", "stream"):
        assert table_problems(source(), with_mode(mode), engine_for("trino")) == []
        table = source(labelled_at=DateTime())
        assert table_problems(table, with_mode(mode), engine_for("trino")) == []
    mapped = with_mode("memory").model_copy(update={"columns": {"grp": "segment"}})
    table = source(grp=None, segment=String(10), attributes=JSON())
    assert mapped.source_column("grp") == "segment"
    assert table_problems(table, mapped, engine_for("trino")) == []


@pytest.mark.parametrize(
    ("table", "mode", "refused"),
    [
        (source(predicted_at=String(40)), "memory", "is read from a timestamp column on trino"),
        (source(), "pushdown", "scan mode 'pushdown' groups text in SQL"),
        (source(grp=None, attributes=JSON()), "memory", "'attributes', which is not read here"),
    ],
    ids=["text timestamp", "push-down", "JSON attribute"],
)
def test_the_generic_engine_refuses_what_it_cannot_do_safely_in_one_line(table, mode, refused):
    [problem] = table_problems(table, with_mode(mode), engine_for("trino"))
    assert refused in problem and "trino (an engine biasaudit has no module for)" in problem
    assert "\n" not in problem
    # the engines biasaudit knows read each of these
    assert table_problems(table, with_mode(mode), engine_for("postgresql")) == []


def test_the_generic_engine_finds_repeated_ids_only_where_no_collation_decides():
    generic = engine_for("trino")
    assert generic.duplicates_refusal(source(), AUDIT) is None  # integer ids
    refusal = generic.duplicates_refusal(source(prediction_id=String(20)), AUDIT)
    assert refusal is not None and "scan.ids_unique = true" in refusal
    assert (
        engine_for("postgresql").duplicates_refusal(source(prediction_id=String(20)), AUDIT) is None
    )


class CataloguedGeneric(Generic):
    """The generic SQL with DuckDB's catalogue (duckdb-engine's own reflection fails on DuckDB)."""

    reflect = DuckDB.reflect
    table_names = DuckDB.table_names
    unique_keys = DuckDB.unique_keys


def _duckdb_source(tmp_path, text_ids: bool):
    engine = make_engine(f"duckdb:///{tmp_path / 's.duckdb'}")
    frame = pd.DataFrame(
        {
            "prediction_id": [f"p{i}" for i in range(40)] if text_ids else list(range(40)),
            "model_id": "m",
            "predicted_at": pd.Timestamp("2026-05-01 10:00:00"),
            "y_true": [i % 2 for i in range(40)],
            "y_pred": [(i // 2) % 2 for i in range(40)],
            "grp": [
                "A" if i < 25 else "a" for i in range(40)
            ],  # equal under a case-blind collation
        }
    )
    frame.to_sql("src", engine, index=False)
    return engine


@pytest.mark.parametrize("mode", ["memory", "stream"])
def test_a_scan_through_the_generic_engine_equals_the_engines_own(tmp_path, monkeypatch, mode):
    """DuckDB's rows scanned by the generic module (as if DuckDB were unknown) give the cells,
    quarantine and fingerprint its own module gives: the generic SQL is real SQL, not a stub."""
    engine = _duckdb_source(tmp_path, text_ids=False)
    now = datetime(2026, 6, 1, tzinfo=UTC)
    own = scan_window(engine, with_mode(mode), None, now, now)
    monkeypatch.setitem(engines.ENGINES, "duckdb", CataloguedGeneric("duckdb"))
    generic = scan_window(engine, with_mode(mode), None, now, now)
    pd.testing.assert_frame_equal(generic.cells, own.cells)
    assert (generic.rows_read, generic.rows_valid, generic.fingerprint) == (
        own.rows_read,
        own.rows_valid,
        own.fingerprint,
    )
    assert set(own.cells["grp"]) == {"A", "a"}
    engine.dispose()


def test_text_ids_in_stream_mode_through_the_generic_engine_need_a_declared_key(
    tmp_path, monkeypatch
):
    """Stream mode finds repeated ids in SQL, which on an unknown engine may compare text by a
    collation blind to case: refused, unless the user declares the ids unique; memory mode finds
    them in pandas and reads the same table."""
    engine = _duckdb_source(tmp_path, text_ids=True)
    now = datetime(2026, 6, 1, tzinfo=UTC)
    monkeypatch.setitem(engines.ENGINES, "duckdb", CataloguedGeneric("duckdb"))
    with pytest.raises(SourceError, match="repeated prediction ids in text column 'prediction_id'"):
        scan_window(engine, with_mode("stream"), None, now, now)
    assert scan_window(engine, with_mode("memory"), None, now, now).rows_valid == 40
    declared = with_mode("stream")
    declared = declared.model_copy(
        update={"scan": declared.scan.model_copy(update={"ids_unique": True})}
    )
    assert scan_window(engine, declared, None, now, now).rows_valid == 40
    engine.dispose()
