"""Rows time-stamped in the future are read and quarantined as not_in_future in every window and
scan mode, on SQLite, PostgreSQL, MariaDB and DuckDB; rows outside the window are not read; and a
run's stored and printed accounting balances: read = valid + quarantined.

Expected rows are decided here from the generated moments and the window's definition, never by
the code under test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, select
from typer.testing import CliRunner

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.read import EmptyWindow
from biasaudit.db.sources.scan import memory_cells, pushdown_cells, stream_cells
from biasaudit.db.store.history import list_runs
from biasaudit.db.store.models import QuarantinedRow
from biasaudit.flows import audit as flow
from biasaudit.flows import pipeline
from biasaudit.flows.cli import app
from tests.test_typed_sources import audit_of, create

NOW = datetime(2026, 6, 1, tzinfo=UTC)
LENGTHS = {"all": None, "last_day": timedelta(days=1), "last_30_days": timedelta(days=30)}
# Moments relative to NOW: inside recent windows, before their starts, after the end but within
# the five minutes of clock skew (not the future), and in the future.
MOMENTS = {
    "hour_ago": NOW - timedelta(hours=1),
    "half_day_ago": NOW - timedelta(hours=12),
    "ten_days_ago": NOW - timedelta(days=10),
    "year_ago": NOW - timedelta(days=400),
    "skew": NOW + timedelta(minutes=3),
    "hour_ahead": NOW + timedelta(hours=1),
    "year_2099": datetime(2099, 1, 1, tzinfo=UTC),
}
FUTURE = {k for k, m in MOMENTS.items() if m > NOW + timedelta(minutes=5)}


def _table(engine, kind: str) -> None:
    """Table ``src``: one row per moment, its time as a timestamp column or as ISO text."""
    dialect = engine.dialect.name
    aware = kind == "timestamp" and dialect in {"postgresql", "duckdb"}
    table = Table(
        "src",
        MetaData(),
        Column("pid", String(20)),
        Column("model", String(10)),
        Column("made_at", DateTime(timezone=aware) if kind == "timestamp" else String(40)),
        Column("label", Integer),
        Column("pred", Integer),
        Column("grp", String(10)),
    )

    def stored(moment: datetime):
        if kind == "text":
            return moment.isoformat()
        return moment if aware else moment.replace(tzinfo=None)

    rows = [
        {"pid": k, "model": "m", "made_at": stored(m), "label": i % 2, "pred": 1, "grp": "A"}
        for i, (k, m) in enumerate(MOMENTS.items())
    ]
    create(engine, table, rows)


def _audit(window: str):
    return audit_of(
        window=window,
        columns={
            "prediction_id": "pid",
            "model_id": "model",
            "predicted_at": "made_at",
            "y_true": "label",
            "y_pred": "pred",
        },
    )


@pytest.mark.parametrize("kind", ["timestamp", "text"])
@pytest.mark.parametrize("window", list(LENGTHS))
def test_future_rows_are_read_and_quarantined_in_every_window_and_mode(
    source_db_url, kind, window
):
    """A row later than the clock plus the skew (an hour ahead, 2099) is read and quarantined as
    not_in_future in windows all, last_day and last_30_days, ending now or earlier (a backfill),
    in the three scan modes; rows before the start or after the end but not in the future are
    not read; the rows read are the accepted plus the quarantined."""
    engine = make_engine(source_db_url)
    _table(engine, kind)
    audit = _audit(window)
    for end in (NOW, NOW - timedelta(hours=6)):  # a window ending now, and a backfill's
        length = LENGTHS[window]
        start = None if length is None else end - length
        inside = {k for k, m in MOMENTS.items() if (start is None or m > start) and m <= end}
        for mode, scanned in {
            "memory": memory_cells(engine, audit, start, end, NOW),
            "stream": stream_cells(engine, audit, start, end, NOW, chunk_rows=2),
            "pushdown": pushdown_cells(engine, audit, start, end, NOW),
        }.items():
            where = (mode, window, end)
            quarantined = scanned.quarantine
            assert sorted(quarantined["row_ref"]) == sorted(FUTURE), where
            assert set(quarantined["rule"]) == {"not_in_future"}, where
            assert set(quarantined["column_name"]) == {"predicted_at"}, where
            assert scanned.rows_valid == int(scanned.cells["n"].sum()) == len(inside), where
            assert scanned.rows_read == len(inside) + len(FUTURE), where
    engine.dispose()


@pytest.mark.parametrize("mode", ["memory", "stream", "pushdown"])
def test_a_window_of_future_rows_only_is_read_not_empty(source_db_url, mode):
    """A window whose only rows are in the future is not an empty window: they are read and
    quarantined (the run then fails with nothing to audit, naming the rule)."""
    engine = make_engine(source_db_url)
    _table(engine, "timestamp")
    audit = _audit("last_day")
    end = NOW - timedelta(days=100)  # no row between the start and the end
    scans = {
        "memory": lambda: memory_cells(engine, audit, end - timedelta(days=1), end, NOW),
        "stream": lambda: stream_cells(engine, audit, end - timedelta(days=1), end, NOW, 2),
        "pushdown": lambda: pushdown_cells(engine, audit, end - timedelta(days=1), end, NOW),
    }
    try:
        scanned = scans[mode]()
    except EmptyWindow as error:
        pytest.fail(f"future rows left out: {error}")
    assert (scanned.rows_read, scanned.rows_valid) == (len(FUTURE), 0)
    assert sorted(scanned.quarantine["row_ref"]) == sorted(FUTURE)
    engine.dispose()


@pytest.mark.parametrize("mode", ["memory", "stream", "pushdown"])
def test_a_run_stores_and_prints_the_future_row_in_its_accounting(
    db_url, tmp_path, monkeypatch, mode
):
    """`biasaudit run` of window "all" over 30 rows, one dated 2099: 30 read, 29 valid, 1
    quarantined as not_in_future, as stored with the run and as printed."""
    engine = make_engine(db_url)
    table = Table(
        "decisions",
        MetaData(),
        Column("case_no", String(10)),
        Column("decided", DateTime),
        Column("label", Integer),
        Column("decision", Integer),
        Column("region", String(10)),
    )
    past = datetime(2026, 5, 1)
    rows = [
        {
            "case_no": f"c{i}",
            "decided": datetime(2099, 1, 1) if i == 29 else past + timedelta(hours=i),
            "label": i % 2,
            "decision": (i // 2) % 2,
            "region": "north" if i % 3 else "south",
        }
        for i in range(30)
    ]
    create(engine, table, rows)
    config = tmp_path / "audits.toml"
    config.write_text(
        '[[audits]]\nname = "d"\nmodel = "rules"\nsource = "decisions"\nwindow = "all"\n'
        'attributes = ["region"]\nmetrics = ["tpr", "fpr"]\n'
        'columns = { prediction_id = "case_no", predicted_at = "decided", y_true = "label", '
        'y_pred = "decision" }\n'
        f"scan = {{ mode = {mode!r} }}\nthresholds = {{ bootstrap_replicates = 100 }}\n"
    )
    monkeypatch.setenv("BIASAUDIT_REPORTS_DIR", str(tmp_path / "reports"))
    # The flow's body as plain calls (no Prefect run), as `biasaudit run` calls it.
    monkeypatch.setattr(flow, "audit_flow", pipeline.run_audit)
    result = CliRunner().invoke(app, ["run", "d", "-c", str(config), "--db", db_url])
    assert result.exit_code == 0, result.output
    assert "29 valid rows, 1 quarantined" in result.output
    run = list_runs(engine).iloc[0]
    assert (run["rows_read"], run["rows_valid"], run["rows_quarantined"]) == (30, 29, 1)
    with engine.connect() as connection:
        stored = connection.execute(
            select(QuarantinedRow.row_ref, QuarantinedRow.column_name, QuarantinedRow.rule)
        ).all()
    assert [tuple(r) for r in stored] == [("c29", "predicted_at", "not_in_future")]
    engine.dispose()
