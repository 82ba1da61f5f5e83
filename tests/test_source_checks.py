"""A source is checked against its audit before any row is read (``biasaudit audits`` and every
run): the table, each column the audit needs and its type; and predicted_at is needed only where
the window or the monitor needs it. On SQLite, PostgreSQL, MariaDB and DuckDB.

Expected problems and cells are written from the tables these tests create, never computed by the
code under test.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import JSON, Boolean, Column, DateTime, Integer, MetaData, String, Table
from typer.testing import CliRunner

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.catalogue import SourceError, source_problems
from biasaudit.db.sources.read import read_predictions
from biasaudit.db.sources.scan import memory_cells, pushdown_cells, stream_cells

from .test_typed_sources import audit_of, create, expected_cells, same_cells

NOW = datetime(2026, 6, 1, tzinfo=UTC)
runner = CliRunner()


def untimed_table(engine, n: int = 120):
    """A source without any timestamp column: ids, labels, decisions, a group; returns its rows."""
    rng = np.random.default_rng(7)
    rows = [
        {
            "prediction_id": f"p{i}",
            "y_true": None if r < 0.1 else int(r < 0.5),
            "y_pred": int(d < 0.4),
            "grp": str(g),
        }
        for i, (r, d, g) in enumerate(zip(rng.random(n), rng.random(n), rng.choice(["A", "B"], n)))
    ]
    table = Table(
        "untimed",
        MetaData(),
        Column("prediction_id", String(20)),
        Column("y_true", Integer),
        Column("y_pred", Integer),
        Column("grp", String(4)),
    )
    create(engine, table, rows)
    return rows


def test_window_all_reads_a_source_without_timestamps_in_every_mode(source_db_url):
    """It audits a source that has no predicted_at column over the window "all" (no monitor) in
    the memory, stream and push-down modes, every row counted."""
    engine = make_engine(source_db_url)
    rows = untimed_table(engine)
    audit = audit_of(source="untimed")
    truth = pd.DataFrame(rows).astype({"y_true": "float64"})
    expected = expected_cells(truth[["grp", "y_true", "y_pred"]], ["grp"])
    scans = {
        "memory": memory_cells(engine, audit, None, NOW, NOW),
        "stream": stream_cells(engine, audit, None, NOW, NOW, chunk_rows=1000),
        "pushdown": pushdown_cells(engine, audit, None, NOW, NOW),
    }
    for mode, scanned in scans.items():
        same_cells(scanned.cells, expected)
        assert scanned.rows_read == scanned.rows_valid == len(rows), mode
        assert scanned.quarantine.empty, mode
    assert scans["memory"].fingerprint == scans["stream"].fingerprint
    engine.dispose()


HAS = "it has: prediction_id, y_true, y_pred, grp"


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        (
            {"window": "last_30_days"},
            "no column 'predicted_at' (predicted_at, needed by window 'last_30_days')",
        ),
        (
            {"monitor": {"label_delay_days": 1}},
            "no column 'predicted_at' (predicted_at, needed by [audits.monitor])",
        ),
        ({"columns": {"predicted_at": "at"}}, "no column 'at' (predicted_at)"),
    ],
)
def test_a_window_a_monitor_or_a_mapping_needs_timestamps(tmp_path, fields, line):
    """It refuses a source without predicted_at where the window, the monitor or an explicit
    mapping needs it, naming the column, what needs it and the columns there are."""
    engine = make_engine(f"sqlite:///{tmp_path / 's.db'}")
    untimed_table(engine, n=5)
    audit = audit_of(source="untimed", **fields)
    assert source_problems(engine, audit) == [f"source 'untimed': {line}; {HAS}"]
    with pytest.raises(SourceError, match="no column"):
        read_predictions(engine, audit, None, NOW, NOW)
    engine.dispose()


def test_every_missing_column_is_one_line(tmp_path):
    """It names each missing column (mapped, canonical, attribute, decision score, model version)
    with what it is for and the columns the table has, and a missing table with the tables there
    are, all at once."""
    engine = make_engine(f"sqlite:///{tmp_path / 's.db'}")
    untimed_table(engine, n=5)
    audit = audit_of(
        source="untimed",
        model_version="2",
        columns={"y_true": "label"},
        attributes=["grp", "race"],
        decision={"score": "risk", "threshold": 0.5},
    )
    assert source_problems(engine, audit) == [
        f"source 'untimed': no column 'model_version' (model_version, configured as '2'); {HAS}",
        f"source 'untimed': no column 'label' (y_true); {HAS}",
        (
            "source 'untimed': no column 'race' (attribute 'race', and no 'attributes' JSON "
            f"column either); {HAS}"
        ),
        f"source 'untimed': no column 'risk' (decision.score); {HAS}",
    ]
    assert source_problems(engine, audit_of(source="ghost")) == [
        "source 'ghost': no such table or view in the database; it has: untimed"
    ]
    engine.dispose()


def test_columns_of_unusable_types_are_named(source_db_url):
    """It names each column whose type cannot hold what it maps (every value would fail its
    rule), with its type and the kinds that work; SQLite's declared types bind nothing, so
    nothing is judged there."""
    engine = make_engine(source_db_url)
    table = Table(
        "wrong",
        MetaData(),
        Column("prediction_id", DateTime),
        Column("predicted_at", Integer),
        Column("y_true", DateTime),
        Column("y_pred", Boolean),  # a boolean decision is fine (TINYINT on MariaDB)
        Column("score", DateTime),
        Column("grp", Integer),  # numbers are groups too
        Column("tags", JSON),
    )
    create(engine, table, [])
    audit = audit_of(source="wrong", attributes=["grp", "tags"])
    problems = source_problems(engine, audit)
    if engine.dialect.name == "sqlite":
        assert problems == []
        return
    expected = [
        ("prediction_id", "prediction_id", "text, number or uuid"),
        ("predicted_at", "predicted_at", "text or timestamp"),
        ("y_true", "y_true", "text, number or boolean"),
        ("score", "score", "text or number"),
    ]
    if engine.dialect.name != "mysql":  # MariaDB's JSON is LONGTEXT: text
        expected.append(("tags", "attribute 'tags'", "text, number or boolean"))
    assert len(problems) == len(expected), problems
    for problem, (column, what, kinds) in zip(problems, expected):
        assert problem.startswith(f"source 'wrong': column {column!r} ({what}) is of type "), (
            problem
        )
        assert problem.endswith(f"; {what} is read from a {kinds} column"), problem
    engine.dispose()


def test_audits_checks_each_source_in_its_database(tmp_path):
    """`biasaudit audits` checks each audit's source in its own database (source_db, else --db)
    without running it: one line per problem naming the audit, table and column, and exit 1."""
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.cli import app

    store = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(store)
    engine = make_engine(store)
    untimed_table(engine, n=5)
    engine.dispose()
    warehouse = f"sqlite:///{tmp_path / 'warehouse.db'}"
    engine = make_engine(warehouse)
    columns = [Column("prediction_id", String(20)), Column("y_true", Integer), Column("grp", String)]
    create(engine, Table("elsewhere", MetaData(), *columns), [])
    engine.dispose()
    config = tmp_path / "a.toml"
    config.write_text(
        '[[audits]]\nname = "good"\nmodel = "m"\nsource = "untimed"\nattributes = ["grp"]\n'
        '[[audits]]\nname = "far"\nmodel = "m"\nsource = "elsewhere"\nattributes = ["grp"]\n'
        f'source_db = "{warehouse}"\n'
        '[[audits]]\nname = "typo"\nmodel = "m"\nsource = "untimed"\nattributes = ["grp"]\n'
        'columns = { y_true = "lable" }\n'
    )
    result = runner.invoke(app, ["audits", "-c", str(config), "--db", store])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith(("audit '", "error"))]
    assert lines == [
        (
            "audit 'far': source 'elsewhere': no column 'y_pred' (y_pred); "
            "it has: prediction_id, y_true, grp"
        ),
        f"audit 'typo': source 'untimed': no column 'lable' (y_true); {HAS}",
        f"error: 2 of 3 audits in {config} are invalid",
    ]
    good = next(line for line in result.output.splitlines() if "│ good " in line)
    assert "│ ok " in good
    config.write_text(config.read_text().split('[[audits]]\nname = "far"')[0])
    result = runner.invoke(app, ["audits", "-c", str(config), "--db", store])
    assert result.exit_code == 0, result.output


def test_a_run_over_all_time_needs_no_timestamps(tmp_path):
    """It runs an audit of window "all" over a source without timestamps to a stored run that
    counts every row."""
    from biasaudit.db.store.history import list_runs
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.pipeline import run_audit

    store = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(store)
    engine = make_engine(store)
    rows = untimed_table(engine)
    config = tmp_path / "a.toml"
    config.write_text(
        '[[audits]]\nname = "u"\nmodel = "m"\nsource = "untimed"\nattributes = ["grp"]\n'
        "[audits.thresholds]\nbootstrap_replicates = 100\n"
    )
    result = run_audit("u", str(config), store, NOW)
    run = list_runs(engine).set_index("id").loc[result["run_id"]]
    assert run["status"] == "succeeded"
    assert run["rows_read"] == run["rows_valid"] == len(rows)
    engine.dispose()
