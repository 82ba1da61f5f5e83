"""Streaming and push-down scans give the in-memory path's counts, quarantine and accounting."""

from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import Column, DateTime, Float, Integer, MetaData, String, Table

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.read import read_predictions
from biasaudit.db.sources.scan import memory_cells, pushdown_cells, stream_cells
from biasaudit.schemas.config import parse_config
from biasaudit.schemas.quarantine import split_valid
from biasaudit.tasks.counts import group_counts

from .conftest import insert_rows

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def write_source(url, rows=5000, seed=0):
    """A plain source table with some invalid rows and repeated prediction ids across the table."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "pid": [f"p{i}" for i in range(rows)],
            "model": "m",
            "at": pd.Timestamp("2026-05-01") + pd.to_timedelta(rng.uniform(0, 30, rows), unit="D"),
            "label": np.where(rng.random(rows) < 0.1, np.nan, rng.integers(0, 2, rows)),
            "pred": rng.integers(0, 2, rows),
            "score": rng.random(rows),
            "race": rng.choice(["A", "B", "C", "D"], rows, p=[0.6, 0.25, 0.1, 0.05]),
            "sex": rng.choice(["F", "M"], rows),
        }
    )
    frame.loc[rng.choice(rows, 40, replace=False), "pred"] = 2  # invalid predictions
    frame.loc[rng.choice(rows, 20, replace=False), "score"] = 1.5  # invalid scores
    frame.loc[rng.choice(rows, 15, replace=False), "race"] = " "  # empty attributes
    frame.loc[rows - 30 :, "pid"] = frame.loc[:29, "pid"].to_numpy()  # duplicates far apart
    frame.loc[rows - 5 :, "at"] = pd.Timestamp("2027-01-01")  # in the future
    engine = make_engine(url)
    table = Table(
        "scored",
        MetaData(),
        Column("pid", String(20)),
        Column("model", String(10)),
        Column("at", DateTime),
        Column("label", Integer),
        Column("pred", Integer),
        Column("score", Float),
        Column("race", String(10)),
        Column("sex", String(10)),
    )
    table.drop(engine, checkfirst=True)
    table.create(engine)
    insert_rows(engine, table, frame)
    return engine


AUDIT = parse_config(
    {
        "audits": [
            {
                "name": "s",
                "model": "m",
                "source": "scored",
                "attributes": ["race", "sex"],
                "intersections": [["race", "sex"]],
                "columns": {
                    "prediction_id": "pid",
                    "model_id": "model",
                    "predicted_at": "at",
                    "y_true": "label",
                    "y_pred": "pred",
                },
            }
        ]
    }
).audits[0]


def test_stream_and_pushdown_match_memory(db_url):
    """It gives identical counts, the same quarantined rows and row accounting in all three modes."""
    engine = write_source(db_url)
    frame = read_predictions(engine, AUDIT, None, NOW, NOW)
    valid, quarantine = split_valid(frame, AUDIT.attributes, NOW)
    memory = group_counts(valid, AUDIT.attributes, AUDIT.intersections)
    assert len(frame) - len(valid) > 80  # the fixture really holds invalid rows

    def key(counts):
        return counts.sort_values(["attribute", "group_name", "subset"]).reset_index(drop=True)

    for reduced in (
        memory_cells(engine, AUDIT, None, NOW, NOW),
        stream_cells(engine, AUDIT, None, NOW, NOW, chunk_rows=1000),
        pushdown_cells(engine, AUDIT, None, NOW, NOW),
    ):
        counts = group_counts(reduced.cells, AUDIT.attributes, AUDIT.intersections)
        pd.testing.assert_frame_equal(key(counts), key(memory))
        assert reduced.rows_read == len(frame) and reduced.rows_valid == len(valid)
        assert reduced.rows_unlabelled == int(valid["y_true"].isna().sum())
        assert sorted(reduced.quarantine["row_ref"]) == sorted(quarantine["row_ref"])
        assert sorted(reduced.quarantine["rule"]) == sorted(quarantine["rule"])


@pytest.mark.parametrize("chunk_rows", [1000, 2500])
def test_stream_fingerprint_does_not_depend_on_chunking(db_url, chunk_rows):
    """It fingerprints the same window the same way whatever the chunk size."""
    engine = write_source(db_url)
    whole = stream_cells(engine, AUDIT, None, NOW, NOW, chunk_rows=10_000)
    assert (
        stream_cells(engine, AUDIT, None, NOW, NOW, chunk_rows=chunk_rows).fingerprint
        == whole.fingerprint
    )


@pytest.mark.parametrize("mode", ["stream", "pushdown"])
def test_audit_in_each_scan_mode_stores_the_memory_results(db_url, tmp_path, mode):
    """It stores the same counts and metrics through the flow body in every scan mode."""
    from biasaudit.db.store.history import run_metrics
    from biasaudit.db.store.load import load_predictions
    from biasaudit.flows.audit import run_audit
    from biasaudit.flows.demo import END, GROUPS, synthetic_predictions

    data = synthetic_predictions()
    load_predictions(
        make_engine(db_url), data[data["model_id"] == "hiring-screen"], list(GROUPS), "demo"
    )
    body = (
        '[[audits]]\nname = "h"\nmodel = "hiring-screen"\nattributes = ["sex", "race"]\n'
        'intersections = [["race", "sex"]]\nmetrics = ["tpr", "fpr", "ppr"]\n'
    )
    (tmp_path / "memory.toml").write_text(body)
    (tmp_path / "other.toml").write_text(
        body + f'[audits.scan]\nmode = "{mode}"\nchunk_rows = 4000\n'
    )
    first = run_audit("h", str(tmp_path / "memory.toml"), db_url, END)
    second = run_audit("h", str(tmp_path / "other.toml"), db_url, END)
    assert second["new"] and second["run_id"] != first["run_id"]  # configuration differs
    engine = make_engine(db_url)
    a, b = run_metrics(engine, first["run_id"]), run_metrics(engine, second["run_id"])
    pd.testing.assert_frame_equal(a, b)


def test_unique_key_on_ids_is_recognised(db_url):
    """It trusts a unique key on (model, prediction id) and skips the duplicate scan, not otherwise."""
    from biasaudit.db.sources.catalogue import reflect_source
    from biasaudit.db.sources.cells import ids_are_unique

    engine = write_source(db_url)
    with engine.connect() as connection:
        assert not ids_are_unique(connection, reflect_source(engine, "scored"), AUDIT)
        default = parse_config(
            {"audits": [{"name": "d", "model": "m", "attributes": ["race"]}]}
        ).audits[0]
        assert ids_are_unique(connection, reflect_source(engine, "predictions"), default)
