"""The stream mode's Arrow reader: values quoted safely into PostgreSQL's COPY, batches of the
configured size, and the typed frames' fingerprint equal to the driver values' one."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.fingerprints import row_hash_sum
from biasaudit.db.sources.stream import _rebatched, object_frame, stream_cells, typed_frame
from biasaudit.schemas.config import parse_config

from .conftest import on_databases

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def audit_for(model: str):
    return parse_config(
        {
            "audits": [
                {
                    "name": "s",
                    "model": model,
                    "source": "quoted",
                    "attributes": ["grp"],
                    "columns": {
                        "prediction_id": "pid",
                        "model_id": "model",
                        "predicted_at": "made",
                        "y_true": "label",
                        "y_pred": "pred",
                    },
                }
            ]
        }
    ).audits[0]


@pytest.mark.parametrize("model", ["m' OR '1'='1", "m\\'", "m"])
def test_model_ids_are_values_not_sql(source_db_url, model):
    """It reads exactly the rows of a model whose id holds quotes and backslashes."""
    engine = make_engine(source_db_url)
    models = ["m' OR '1'='1", "m\\'", "m"]
    table = Table(
        "quoted",
        MetaData(),
        Column("pid", String(9)),
        Column("model", String(20)),
        Column("made", DateTime),
        Column("label", Integer),
        Column("pred", Integer),
        Column("grp", String(9)),
    )
    table.drop(engine, checkfirst=True)
    table.create(engine)
    with engine.begin() as connection:
        connection.execute(
            table.insert(),
            [
                {"pid": f"p{i}", "model": m, "made": datetime(2026, 5, 1), "label": 1, "pred": 0,
                 "grp": "x"}
                for i, m in enumerate(models)
            ],
        )
    scanned = stream_cells(engine, audit_for(model), None, NOW, NOW, chunk_rows=10)
    engine.dispose()
    assert scanned.rows_read == scanned.rows_valid == 1
    assert scanned.quarantine.empty


def test_batches_have_the_configured_size():
    """It regroups the reader's batches into chunks of exactly chunk_rows (the last fewer)."""
    batches = [pa.record_batch({"a": pa.array(range(n), pa.int64())}) for n in (3, 7, 1, 0, 6)]
    sizes = [b.num_rows for b in _rebatched(iter(batches), 4)]
    assert sizes == [4, 4, 4, 4, 1]


def test_typed_and_driver_values_fingerprint_alike():
    """It hashes a typed Arrow batch as the same values read as Python objects."""
    batch = pa.record_batch(
        {
            "id": pa.array([1, None, 10**12], pa.int64()),
            "text": pa.array(["a", None, " "]),
            "flag": pa.array([True, None, False]),
            "score": pa.array([0.25, None, 1.0], pa.float32()),
            "at": pa.array([datetime(2026, 1, 1, tzinfo=UTC), None, datetime(1850, 1, 1)],
                           pa.timestamp("us", "UTC")),
        }
    )
    assert row_hash_sum(typed_frame(batch)) == row_hash_sum(object_frame(batch))


@on_databases("postgresql")
def test_a_slow_source_fails_the_arrow_read_at_the_statement_timeout(db_url, monkeypatch):
    """The Arrow reader's own connection keeps the engine's statement timeout: a source slower
    than it fails the scan with SQLAlchemy's OperationalError (which db.retry retries) instead of
    hanging. The engine is made before the timeout is lowered, so its own statements (the
    duplicate scan) run under the default and the failure is the Arrow reader's."""
    import psycopg
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from biasaudit.db.retry import is_transient

    engine = make_engine(db_url)
    with engine.begin() as connection:
        connection.execute(
            text(
                "CREATE TABLE rows_ (pid text, model text, made timestamp, label int, pred int, "
                "grp text)"
            )
        )
        connection.execute(
            text(
                "INSERT INTO rows_ SELECT 'p' || g, 'm', '2026-05-01', 1, 0, 'x' "
                "FROM generate_series(1, 300) g"
            )
        )
        connection.execute(  # 10 ms a row: 3 s in all
            text(
                "CREATE VIEW quoted AS SELECT r.* FROM rows_ r "
                "WHERE length(r.pid || pg_sleep(0.01)::text) > 0"
            )
        )
    monkeypatch.setenv("BIASAUDIT_STATEMENT_TIMEOUT_SECONDS", "0.5")
    with pytest.raises(OperationalError) as raised:
        stream_cells(engine, audit_for("m"), None, NOW, NOW, chunk_rows=100)
    assert is_transient(raised.value) and "statement timeout" in str(raised.value)
    assert not isinstance(raised.value.orig, psycopg.Error)  # not the engine's connection
    engine.dispose()
