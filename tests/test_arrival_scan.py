"""An audit run reads the source's label arrival times (``labelled_at``) and its label-completeness
warnings say what they show, the same in every scan mode and on every database."""

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import Column, DateTime, Float, Integer, MetaData, String, Table, text

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.cells import input_fingerprint
from biasaudit.db.sources.scan import memory_cells, pushdown_cells, stream_cells
from biasaudit.db.store.history import get_run
from biasaudit.schemas.config import parse_config

from .conftest import insert_rows

END = datetime(2026, 6, 1, tzinfo=UTC)
MODES = ["memory", "stream", "pushdown"]


def write_arrivals(url, by: str, rows: int = 4000, seed: int = 1):
    """A source whose labels arrive after a delay and are missing where not arrived by END:
    ``by="outcome"``, positives' labels take four times as long; ``by="decision"``, labels of
    rejections take four times as long whatever the outcome."""
    rng = np.random.default_rng(seed)
    group = rng.choice(["A", "B"], rows)
    y = (rng.random(rows) < 0.4).astype(int)
    pred = np.where(rng.random(rows) < 0.8, y, 1 - y)
    slow = y == 1 if by == "outcome" else pred == 0
    delay = rng.exponential(np.where(slow, 20.0, 5.0))
    at = pd.Timestamp("2026-05-01") + pd.to_timedelta(rng.uniform(0, 30, rows), unit="D")
    arrived = at + pd.to_timedelta(delay, unit="D")
    known = arrived <= pd.Timestamp(END.replace(tzinfo=None))
    frame = pd.DataFrame(
        {
            "pid": [f"p{i}" for i in range(rows)],
            "model": "m",
            "at": at,
            "arrived": pd.Series(arrived).where(known),
            "label": pd.Series(y).where(known),
            "pred": pred,
            "grp": group,
        }
    )
    engine = make_engine(url)
    _replace(engine, "arrivals", frame, {"arrived": DateTime, "pred": Integer})
    return engine


def _replace(engine, name: str, frame: pd.DataFrame, types: dict) -> None:
    """Table ``name`` made anew, keyed by pid, holding ``frame`` (NaN as NULL): pid, model, at,
    label and grp with their usual types, the other columns of the types given."""
    columns = {"model": String(10), "at": DateTime, "label": Integer, "grp": String(10), **types}
    table = Table(
        name,
        MetaData(),
        Column("pid", String(20), primary_key=True),
        *(Column(c, columns[c]) for c in frame.columns if c != "pid"),
    )
    table.drop(engine, checkfirst=True)
    table.create(engine)
    insert_rows(engine, table, frame)


COLUMNS = (
    '[audits.columns]\nprediction_id = "pid"\nmodel_id = "model"\npredicted_at = "at"\n'
    'y_true = "label"\ny_pred = "pred"\nlabelled_at = "arrived"\n'
)


def config(mode: str) -> str:
    return (
        '[[audits]]\nname = "a"\nmodel = "m"\nsource = "arrivals"\nattributes = ["grp"]\n'
        f'window = "all"\nmetrics = ["tpr", "ppv"]\n{COLUMNS}'
        f'[audits.scan]\nmode = "{mode}"\nchunk_rows = 1500\n'
    )


def arrival_audit(source: str, **extra):
    """An audit of ``source`` by grp that reads labelled_at (``arrived``), with ``extra`` keys
    (a decision from a score, say, in place of ``pred``)."""
    columns = {"prediction_id": "pid", "model_id": "model", "predicted_at": "at",
               "y_true": "label", "labelled_at": "arrived"}  # fmt: skip
    if "decision" not in extra:
        columns["y_pred"] = "pred"
    entry = {"name": "a", "model": "m", "source": source, "attributes": ["grp"],
             "window": "all", "columns": columns, **extra}  # fmt: skip
    return parse_config({"audits": [entry]}).audits[0]


def scans_in_every_mode(engine, audit, chunk_rows: int):
    """The memory, stream and push-down scans of the window to END."""
    return [
        memory_cells(engine, audit, None, END, END),
        stream_cells(engine, audit, None, END, END, chunk_rows=chunk_rows),
        pushdown_cells(engine, audit, None, END, END),
    ]


def same_arrival_in_every_mode(engine, audit, chunk_rows: int) -> pd.DataFrame:
    """The arrival counts, equal in every scan mode and covering every labelled valid row."""
    scans = scans_in_every_mode(engine, audit, chunk_rows)
    first = scans[0].arrival
    assert first is not None and int(first["n"].sum()) == scans[0].rows_valid - (
        scans[0].rows_unlabelled
    )
    for other in scans[1:]:
        pd.testing.assert_frame_equal(other.arrival, first)
    return first


def write_scored_arrivals(url, rows: int, seed: int):
    """write_arrivals's source with a score (at least 0.5 where the prediction was 1) in place
    of the prediction, and labelled_at as ISO text at +02:00."""
    engine = write_arrivals(url, "outcome", rows=rows, seed=seed)
    frame = pd.read_sql("SELECT * FROM arrivals", engine)
    rng = np.random.default_rng(seed)
    frame = frame.assign(
        score=np.where(
            frame["pred"] == 1, rng.uniform(0.5, 1, len(frame)), rng.uniform(0, 0.5, len(frame))
        ),
        arrived=pd.to_datetime(frame["arrived"]).map(
            lambda t: None if pd.isna(t) else (t + pd.Timedelta(hours=2)).isoformat() + "+02:00"
        ),
    ).drop(columns="pred")
    _replace(engine, "scored_arrivals", frame, {"arrived": String(40), "score": Float})
    return engine


def run_warnings(url, tmp_path) -> dict[str, list[str]]:
    """The stored summary's label-completeness warnings of a run in each scan mode (and, under
    "page", the memory run's report page)."""
    from biasaudit.flows.audit import run_audit

    told = {}
    for mode in MODES:
        path = tmp_path / f"{mode}.toml"
        path.write_text(config(mode))
        result = run_audit("a", str(path), url, END)
        told[mode] = get_run(make_engine(url), result["run_id"]).summary[
            "label_completeness_warnings"
        ]
        if mode == "memory":
            told["page"] = [Path(result["report"]).read_text()]
    return told


def test_labels_arriving_later_for_positives_are_said_missing_by_outcome(db_url, tmp_path):
    """Positives' labels arrive later: the run's warning says labels are likely missing by the
    outcome (PPV biased, TPR not), in every scan mode alike."""
    write_arrivals(db_url, "outcome")
    told = run_warnings(db_url, tmp_path)
    assert told["memory"] == told["stream"] == told["pushdown"]
    (line,) = told["memory"]
    assert line.startswith("labelled shares differ by decision in grp groups")
    assert "labels of positives arrive later" in line
    assert "labels are likely missing by the outcome" in line
    assert "cannot tell" not in line
    assert "labels are likely missing by the outcome" in told["page"][0]  # the report too


def test_labels_arriving_by_decision_are_said_consistent_with_missing_by_decision(db_url, tmp_path):
    """Rejections' labels arrive later whatever the outcome: the warning says the arrival times
    are consistent with labels missing by the decision, in every scan mode alike."""
    write_arrivals(db_url, "decision")
    told = run_warnings(db_url, tmp_path)
    assert told["memory"] == told["stream"] == told["pushdown"]
    (line,) = told["memory"]
    assert "consistent with labels missing by the decision" in line
    assert "missing by the outcome" not in line and "cannot tell" not in line
    assert "consistent with labels missing by the decision" in told["page"][0]


def test_every_scan_mode_counts_the_same_late_labels(db_url):
    """memory, stream and push-down give the same labelled rows per (group, outcome, decision,
    late), one delay threshold per decision; a source without labelled_at gives none."""
    engine = write_arrivals(db_url, "outcome")
    audit = arrival_audit("arrivals")
    first = same_arrival_in_every_mode(engine, audit, chunk_rows=1000)
    # about half of each decision's labels are late
    late = first[first["late"]].groupby("y_pred")["n"].sum() / first.groupby("y_pred")["n"].sum()
    assert np.allclose(late.to_numpy(), 0.5, atol=0.01)
    plain = audit.model_copy(
        update={"columns": {k: v for k, v in audit.columns.items() if k != "labelled_at"}}
    )
    assert memory_cells(engine, plain, None, END, END).arrival is None


@pytest.mark.parametrize("bad", ["labelled_at"])
def test_labelled_at_is_a_reserved_column_name(bad):
    """labelled_at is a canonical column: no attribute can be named so."""
    with pytest.raises(ValueError, match="reserved"):
        parse_config({"audits": [{"name": "a", "model": "m", "attributes": [bad]}]})


def test_a_decision_from_a_score_and_text_arrival_times_count_alike_in_every_mode(db_url):
    """With the decision derived from a score and labelled_at as ISO text with offsets, the three
    scan modes still count the same late labels, and those follow the decided y_pred."""
    engine = write_scored_arrivals(db_url, rows=2000, seed=3)
    audit = arrival_audit("scored_arrivals", decision={"score": "score", "threshold": 0.5})
    first = same_arrival_in_every_mode(engine, audit, chunk_rows=700)
    assert set(first["y_pred"]) == {0, 1} and first["late"].any()


@pytest.mark.parametrize("change", ["arrival", "score"])
def test_the_input_fingerprint_sees_changes_no_cell_shows(db_url, change):
    """The label that arrived last arriving at once, or a score moved within its decision,
    changes no cell but the arrival counts or the score counts: every scan mode's input
    fingerprint changes (the push-down's cells and quarantine alone do not). Read again, or in
    other chunks, it is unchanged."""
    engine = write_scored_arrivals(db_url, rows=600, seed=4)
    audit = arrival_audit("scored_arrivals", decision={"score": "score", "threshold": 0.5})
    before = scans_in_every_mode(engine, audit, chunk_rows=250)
    # the same input in other chunks, or read again, is the same input (memory's and stream's
    # fingerprints are equal)
    again = scans_in_every_mode(engine, audit, chunk_rows=90)
    assert len({input_fingerprint(s) for s in (*before[:2], *again[:2])}) == 1
    assert input_fingerprint(again[2]) == input_fingerprint(before[2])
    frame = pd.read_sql("SELECT * FROM scored_arrivals", engine)
    if change == "arrival":
        at = pd.to_datetime(frame["at"])
        delay = pd.to_datetime(frame["arrived"], utc=True) - at.dt.tz_localize("UTC")
        row = frame.loc[delay.idxmax()]
        value = (at[delay.idxmax()] + pd.Timedelta(hours=2)).isoformat() + "+02:00"
        column = "arrived"
    else:
        row = frame.loc[(frame["score"] - 0.7).abs().idxmin()]
        value, column = float(row["score"]) + 1e-3, "score"
    with engine.begin() as connection:
        connection.execute(
            text(f"UPDATE scored_arrivals SET {column} = :value WHERE pid = :pid"),
            {"value": value, "pid": row["pid"]},
        )
    after = scans_in_every_mode(engine, audit, chunk_rows=250)
    for mode, old, new in zip(MODES, before, after):
        pd.testing.assert_frame_equal(new.cells, old.cells)
        assert input_fingerprint(new) != input_fingerprint(old), mode
    assert after[2].fingerprint == before[2].fingerprint
