"""An empty window says, in one line, what emptied it: an unknown model, a model whose rows in the
window are all of other versions than the configured model_version (naming them), or no rows in
the window; in every scan mode, on SQLite, PostgreSQL, MariaDB and DuckDB, and through
`biasaudit run`.

Expected lines are written here from the rows generated, never by the code under test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table
from typer.testing import CliRunner

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.read import EmptyWindow
from biasaudit.db.sources.scan import memory_cells, pushdown_cells, stream_cells
from biasaudit.db.sources.window import window_bounds
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.migrate import upgrade
from biasaudit.flows import audit as flow
from biasaudit.flows import pipeline
from biasaudit.flows.cli import app
from tests.test_typed_sources import audit_of, create

NOW = datetime(2026, 6, 1, tzinfo=UTC)
COLUMNS = {
    "prediction_id": "pid",
    "model_id": "model",
    "model_version": "version",
    "predicted_at": "made_at",
    "y_true": "label",
    "y_pred": "pred",
}
SCANS = {
    "memory": lambda engine, audit, start, end: memory_cells(engine, audit, start, end, NOW),
    "stream": lambda engine, audit, start, end: stream_cells(engine, audit, start, end, NOW, 50),
    "pushdown": lambda engine, audit, start, end: pushdown_cells(engine, audit, start, end, NOW),
}


def _table(engine, rows: list[tuple[str, str, datetime]]) -> None:
    """Table ``src`` of (model, version, moment) rows."""
    table = Table(
        "src",
        MetaData(),
        Column("pid", String(20)),
        Column("model", String(10)),
        Column("version", String(10)),
        Column("made_at", DateTime),
        Column("label", Integer),
        Column("pred", Integer),
        Column("grp", String(10)),
    )
    create(
        engine,
        table,
        [
            {
                "pid": f"p{i}",
                "model": model,
                "version": version,
                "made_at": moment.replace(tzinfo=None),
                "label": i % 2,
                "pred": 1,
                "grp": "A",
            }
            for i, (model, version, moment) in enumerate(rows)
        ],
    )


def _message(engine, audit, mode: str, start, end) -> str:
    with pytest.raises(EmptyWindow) as caught:
        SCANS[mode](engine, audit, start, end)
    return str(caught.value)


@pytest.mark.parametrize("mode", list(SCANS))
def test_a_window_of_other_versions_says_which_versions_it_holds(source_db_url, mode):
    """A window holding 120 rows of model m, of versions v1 and v3, audited for model_version v2
    (whose rows are all before the window) says so, naming the versions present; a window with
    no row of the model at all says that instead."""
    engine = make_engine(source_db_url)
    recent, old = NOW - timedelta(days=2), NOW - timedelta(days=90)
    _table(
        engine,
        [("m", "v1", recent)] * 100 + [("m", "v3", recent)] * 20 + [("m", "v2", old)] * 5,
    )
    audit = audit_of(window="last_30_days", model_version="v2", columns=COLUMNS)
    start, end = window_bounds(audit, NOW)
    span = f"window ({start}, {end}]"
    assert _message(engine, audit, mode, start, end) == (
        f"120 predictions of model 'm' in 'src' for {span}, but none of model_version 'v2'; "
        "versions present: 'v1', 'v3'"
    )
    start, end = window_bounds(audit, NOW - timedelta(days=200))
    assert _message(engine, audit, mode, start, end) == (
        f"no predictions of model 'm' (model_version 'v2') in 'src' for window ({start}, {end}]"
    )
    engine.dispose()


def test_a_known_model_among_many_is_not_called_unknown(source_db_url):
    """With 25 models in the source, a model whose window is empty is named as having no
    predictions in the window, not as unknown (the known models were a sample of 20)."""
    engine = make_engine(source_db_url)
    _table(engine, [(f"m{i:02d}", "v1", NOW - timedelta(days=90)) for i in range(25)])
    audit = audit_of(model="m24", window="last_30_days", columns=COLUMNS)
    start, end = window_bounds(audit, NOW)
    for mode in SCANS:
        assert _message(engine, audit, mode, start, end) == (
            f"no predictions of model 'm24' in 'src' for window ({start}, {end}]"
        ), mode
    engine.dispose()


def test_run_prints_the_version_line_once(tmp_path, monkeypatch):
    """`biasaudit run` of an audit whose model_version matches none of the model's rows exits 1
    with one line naming the rows there are and their versions, and nothing else."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    n = 40
    load_predictions(
        make_engine(url),
        pd.DataFrame(
            {
                "prediction_id": [f"p{i}" for i in range(n)],
                "model_id": "credit",
                "model_version": ["1" if i < 30 else "1.1" for i in range(n)],
                "predicted_at": [NOW - timedelta(hours=i + 1) for i in range(n)],
                "y_true": [i % 2 for i in range(n)],
                "y_pred": [(i // 2) % 2 for i in range(n)],
                "race": ["A" if i % 3 else "B" for i in range(n)],
            }
        ),
        ["race"],
        "test",
    )
    config = tmp_path / "audits.toml"
    config.write_text(
        '[[audits]]\nname = "c"\nmodel = "credit"\nmodel_version = "2"\n'
        'window = "last_30_days"\nattributes = ["race"]\n'
    )
    monkeypatch.setattr(flow, "audit_flow", pipeline.run_audit)  # the flow's body, no Prefect
    result = CliRunner().invoke(
        app, ["run", "c", "-c", str(config), "--db", url, "--as-of", "2026-06-01"]
    )
    assert result.exit_code == 1, result.output
    expected = (
        "error: 40 predictions of model 'credit' in 'predictions' for window "
        "(2026-05-02 00:00:00+00:00, 2026-06-01 00:00:00+00:00], but none of model_version "
        "'2'; versions present: '1', '1.1'"
    )
    assert result.output.splitlines() == [expected], result.output
