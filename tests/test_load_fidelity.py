"""CSV and Parquet fidelity of `biasaudit load`: values stored as the text they are,
unstorable values and ragged lines quarantined row by row, late labels updated."""

from __future__ import annotations

import pandas as pd
from sqlalchemy import text
from typer.testing import CliRunner

from biasaudit.db.engine import make_engine
from biasaudit.flows.cli import app

from .conftest import on_databases

runner = CliRunner()
HEADER = "prediction_id,model_id,model_version,predicted_at,y_true,y_pred,zip,group\n"


def load(url, path, *extra):
    """`biasaudit load` of ``path``; the files here are mostly invalid on purpose."""
    extra = (*extra, "--max-invalid-fraction", "1")
    result = runner.invoke(
        app, ["load", str(path), "--db", url, "-a", "zip", "-a", "group", *extra]
    )
    assert result.exit_code == 0, result.output
    return result.output


def stored(url) -> pd.DataFrame:
    engine = make_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT prediction_id, model_version, y_true, attributes FROM predictions")
        ).all()
        quarantined = connection.execute(
            text("SELECT row_ref, column_name, value, rule FROM quarantined_rows")
        ).all()
    engine.dispose()
    frame = pd.DataFrame(rows, columns=["prediction_id", "model_version", "y_true", "attributes"])
    return frame, pd.DataFrame(quarantined, columns=["row_ref", "column_name", "value", "rule"])


def test_csv_values_are_stored_as_written(db_url, tmp_path):
    """It stores ids "007" and "7" as two predictions, version "2.10", zip "02134" and the
    strings NA and None as they are written."""
    path = tmp_path / "p.csv"
    path.write_text(
        HEADER
        + "007,m,2.10,2026-05-01T10:00:00Z,1,1,02134,NA\n"
        + "7,m,2.10,2026-05-01T10:00:00Z,0,1,2134,None\n"
    )
    output = load(db_url, path)
    assert "inserted 2" in output
    frame, quarantine = stored(db_url)
    assert quarantine.empty
    assert sorted(frame["prediction_id"]) == ["007", "7"]
    assert set(frame["model_version"]) == {"2.10"}
    attributes = frame.set_index("prediction_id")["attributes"]
    attributes = attributes.map(lambda a: a if isinstance(a, dict) else __import__("json").loads(a))
    assert attributes["007"] == {"zip": "02134", "group": "NA"}
    assert attributes["7"] == {"zip": "2134", "group": "None"}


def test_unstorable_values_and_ragged_lines_are_quarantined_row_by_row(db_url, tmp_path):
    """It quarantines an id longer than its column, a NUL byte and a line with too many fields,
    each with its original text, and loads the other rows."""
    path = tmp_path / "p.csv"
    long_id = "x" * 200
    path.write_text(
        HEADER
        + f"{long_id},m,1,2026-05-01,1,1,1,A\n"
        + "nul,m,1,2026-05-01,1,1,1,B\x00B\n"
        + "ragged,m,1,2026-05-01,1,1,1,A,extra\n"
        + "ok,m,1,2026-05-01,1,1,1,A\n"
    )
    output = load(db_url, path)
    assert "inserted 1" in output and "quarantined 3" in output
    frame, quarantine = stored(db_url)
    assert list(frame["prediction_id"]) == ["ok"]
    rules = dict(zip(quarantine["rule"], quarantine["value"]))
    assert rules["max_length_128"] == long_id
    assert rules["no_nul_byte"] == "B\\x00B"
    assert rules["ragged_line"] == "ragged,m,1,2026-05-01,1,1,1,A,extra"


@on_databases("sqlite")
def test_scores_outside_the_unit_interval_and_yes_no_labels_are_quarantined(db_url, tmp_path):
    """It quarantines a score of 1.7 (as every scan mode does) and a label spelled yes, with a
    rule that says what is accepted, and loads the other rows."""
    path = tmp_path / "p.csv"
    path.write_text(
        HEADER.replace("\n", ",score\n")
        + "high,m,1,2026-05-01,1,1,1,A,1.7\n"
        + "low,m,1,2026-05-01,1,1,1,A,-0.1\n"
        + "word,m,1,2026-05-01,yes,1,1,A,0.5\n"
        + "ok,m,1,2026-05-01,1,1,1,A,1\n"
    )
    output = load(db_url, path)
    assert "inserted 1" in output and "quarantined 3" in output
    frame, quarantine = stored(db_url)
    assert list(frame["prediction_id"]) == ["ok"]
    assert sorted(map(tuple, quarantine.to_numpy())) == [
        ("high", "score", "1.7", "in_unit_interval"),
        ("low", "score", "-0.1", "in_unit_interval"),
        ("word", "y_true", "yes", "binary: 0/1 or true/false"),
    ]


def test_scores_in_every_writers_notation_load_as_their_numbers(db_url, tmp_path):
    """It loads scores as SQL and CSV writers write them (``5e-05``, ``1E-3``, ``+.5``, ``1.``,
    spaces around) as their numbers, and quarantines text that is no number as ``is_number``,
    NaN as ``not_nan`` and a number outside [0, 1] as ``in_unit_interval``."""
    path = tmp_path / "p.csv"
    written = {"e": "5e-05", "E": "1E-3", "sign": "+.5", "point": "1.", "pad": " 0.25 "}
    bad = {"word": ("n/a", "is_number"), "nan": ("NaN", "not_nan"), "big": ("2e0", "in_unit_interval")}
    path.write_text(
        HEADER.replace("\n", ",score\n")
        + "".join(
            f"{pid},m,1,2026-05-01,1,1,1,A,{score}\n"
            for pid, score in [*written.items(), *((p, v) for p, (v, _) in bad.items())]
        )
    )
    output = load(db_url, path)
    assert f"inserted {len(written)}" in output and f"quarantined {len(bad)}" in output
    engine = make_engine(db_url)
    with engine.connect() as connection:
        scores = dict(connection.execute(text("SELECT prediction_id, score FROM predictions")).all())
    engine.dispose()
    assert scores == {"e": 5e-05, "E": 1e-3, "sign": 0.5, "point": 1.0, "pad": 0.25}
    _, quarantine = stored(db_url)
    assert sorted(map(tuple, quarantine.to_numpy())) == sorted(
        (pid, "score", "NaN" if rule == "not_nan" else value, rule)
        for pid, (value, rule) in bad.items()
    )


def test_reloading_a_row_with_its_late_label_updates_it(db_url, tmp_path):
    """It updates the label of a stored prediction whose outcome became known, says so, and
    leaves known labels alone."""
    first = tmp_path / "a.csv"
    first.write_text(HEADER + "p1,m,1,2026-05-01,,1,1,A\n" + "p2,m,1,2026-05-01,0,1,1,A\n")
    load(db_url, first)
    second = tmp_path / "b.csv"
    second.write_text(HEADER + "p1,m,1,2026-05-01,1,1,1,A\n" + "p2,m,1,2026-05-01,1,1,1,A\n")
    output = load(db_url, second)
    assert "inserted 0" in output and "labels updated 1" in output
    frame, _ = stored(db_url)
    labels = dict(zip(frame["prediction_id"], frame["y_true"]))
    assert labels == {"p1": 1, "p2": 0}


def test_parquet_strings_stay_strings(db_url, tmp_path):
    """It keeps Parquet string columns as strings (leading zeros kept)."""
    path = tmp_path / "p.parquet"
    pd.DataFrame(
        {
            "prediction_id": ["007", "7"],
            "model_id": "m",
            "model_version": "2.10",
            "predicted_at": pd.to_datetime(["2026-05-01", "2026-05-02"], utc=True),
            "y_true": [1, 0],
            "y_pred": [1, 1],
            "zip": ["02134", "2134"],
            "group": ["A", "B"],
        }
    ).to_parquet(path)
    load(db_url, path)
    frame, _ = stored(db_url)
    assert sorted(frame["prediction_id"]) == ["007", "7"]


def test_reloading_a_row_with_another_decision_says_the_stored_one_was_kept(db_url, tmp_path):
    """It counts apart, naming the columns, the rows already present whose y_pred, score or known
    label differ from the stored ones, and keeps the stored values; a late label is an update,
    an identical row merely present."""
    header = HEADER.replace("\n", ",score\n")
    first = tmp_path / "a.csv"
    first.write_text(
        header
        + "same,m,1,2026-05-01,1,1,1,A,0.25\n"
        + "late,m,1,2026-05-01,,1,1,A,0.25\n"
        + "flip,m,1,2026-05-01,1,1,1,A,0.25\n"
        + "rescored,m,1,2026-05-01,1,1,1,A,0.25\n"
        + "relabelled,m,1,2026-05-01,1,1,1,A,0.25\n"
    )
    load(db_url, first)
    second = tmp_path / "b.csv"
    second.write_text(
        header
        + "same,m,1,2026-05-01,1,1,1,A,0.25\n"
        + "late,m,1,2026-05-01,0,1,1,A,0.25\n"
        + "flip,m,1,2026-05-01,1,0,1,A,0.25\n"
        + "rescored,m,1,2026-05-01,1,1,1,A,0.75\n"
        + "relabelled,m,1,2026-05-01,0,1,1,A,0.25\n"
        + "new,m,1,2026-05-01,1,1,1,A,0.5\n"
    )
    output = load(db_url, second)
    assert (
        "read 6, inserted 1, already present 5 (3 with a different y_true, y_pred or score: the "
        "stored values kept), quarantined 0, labels updated 1"
    ) in output, output
    engine = make_engine(db_url)
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT prediction_id, y_true, y_pred, score FROM predictions")
        ).all()
    engine.dispose()
    assert sorted(map(tuple, rows)) == [
        ("flip", 1, 1, 0.25),
        ("late", 0, 1, 0.25),
        ("new", 1, 1, 0.5),
        ("relabelled", 1, 1, 0.25),
        ("rescored", 1, 1, 0.25),
        ("same", 1, 1, 0.25),
    ]
    again = load(db_url, second)
    assert "already present 6 (3 with a different y_true, y_pred or score: " in again, again
