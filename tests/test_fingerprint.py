"""The input fingerprint sees every row: values moved between rows are a new input, in every scan
mode; the same rows in another order are the same input."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, update

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.fingerprints import fingerprint
from biasaudit.db.sources.scan import memory_cells, pushdown_cells, stream_cells

AS_OF = datetime(2026, 6, 1, tzinfo=UTC)
SOURCE = Table(
    "swap_source",
    MetaData(),
    Column("pid", String(10), primary_key=True),
    Column("model", String(10)),
    Column("at", DateTime),
    Column("label", Integer),
    Column("pred", Integer),
    Column("grp", String(10)),
)


def _write_source(engine) -> None:
    """Groups A and B of 200 predictions each: A all selected (1), B none (0); labels alternate."""
    SOURCE.drop(engine, checkfirst=True)
    SOURCE.create(engine)
    rows = [
        {"pid": f"{group}{i}", "model": "m", "at": datetime(2026, 5, 1), "label": i % 2,
         "pred": int(group == "A"), "grp": group}
        for group in "AB"
        for i in range(200)
    ]
    with engine.begin() as connection:
        connection.execute(SOURCE.insert(), rows)


def _set(engine, values: dict[str, dict[str, int]]) -> None:
    """Set columns of single rows: {prediction id: {column: value}}."""
    with engine.begin() as connection:
        for pid, row in values.items():
            connection.execute(update(SOURCE).where(SOURCE.c.pid == pid).values(**row))


def _swap_all_predictions(engine) -> None:
    """A's 200 predictions become 0 and B's 1: each column holds the same values as before."""
    with engine.begin() as connection:
        connection.execute(update(SOURCE).values(pred=1 - SOURCE.c.pred))


CHANGES = {
    "predictions swapped between groups": _swap_all_predictions,
    # after the swap A0 predicts 0 and B0 1: one value moves between rows of different groups
    "a prediction moved": lambda engine: _set(engine, {"A0": {"pred": 1}, "B0": {"pred": 0}}),
    # A1 and B2 are labelled 1 and 0
    "a label moved": lambda engine: _set(engine, {"A1": {"label": 0}, "B2": {"label": 1}}),
}


@pytest.mark.parametrize("mode", ["memory", "stream", "pushdown"])
def test_values_moved_between_rows_are_a_new_input(db_url, tmp_path, mode):
    """It audits again, as a new run, when values move between rows of different groups while
    every column keeps the same values (a 0.40 selection-rate gap reversed, one prediction or one
    label moved); the unchanged table still returns the existing run."""
    from biasaudit.flows.audit import run_audit

    engine = make_engine(db_url)
    _write_source(engine)
    config = tmp_path / "swap.toml"
    config.write_text(
        '[[audits]]\nname = "swap"\nmodel = "m"\nsource = "swap_source"\nattributes = ["grp"]\n'
        'metrics = ["ppr"]\n'
        'columns = { prediction_id = "pid", model_id = "model", predicted_at = "at", '
        'y_true = "label", y_pred = "pred" }\n'
        f'[audits.scan]\nmode = "{mode}"\n'
    )
    first = run_audit("swap", str(config), db_url, AS_OF)
    again = run_audit("swap", str(config), db_url, AS_OF)
    assert first["new"] and not again["new"] and again["run_id"] == first["run_id"]
    seen = {first["run_id"]}
    for what, change in CHANGES.items():
        change(engine)
        outcome = run_audit("swap", str(config), db_url, AS_OF)
        assert outcome["new"] and outcome["run_id"] not in seen, what
        seen.add(outcome["run_id"])
    engine.dispose()


def _scans(engine, audit) -> dict[str, str]:
    """The fingerprint of each scan mode of the whole table."""
    return {
        "memory": memory_cells(engine, audit, None, AS_OF, AS_OF).fingerprint,
        "stream": stream_cells(engine, audit, None, AS_OF, AS_OF, chunk_rows=1000).fingerprint,
        "pushdown": pushdown_cells(engine, audit, None, AS_OF, AS_OF).fingerprint,
    }


MIXED = Table(
    "mixed_source",
    MetaData(),
    Column("pid", String(10)),
    Column("label", Integer),
    Column("pred", Integer),
    Column("grp", String(10)),
)
# Valid rows, and rows quarantined for a prediction of 2 (i % 7 == 0), an empty group or no id.
MIXED_ROWS = [
    {"pid": None if i % 17 == 0 else f"p{i}", "label": i % 2,
     "pred": 2 if i % 7 == 0 else i % 3 % 2, "grp": " " if i % 11 == 0 else "AB"[i % 2]}
    for i in range(300)
]


def _mixed_fingerprints(engine, rows: list[dict]) -> dict[str, str]:
    """Each scan mode's fingerprint of MIXED holding ``rows``, in that order (no key orders
    them)."""
    from biasaudit.schemas.config import parse_config

    audit = parse_config(
        {
            "audits": [
                {
                    "name": "o",
                    "model": "m",
                    "source": "mixed_source",
                    "attributes": ["grp"],
                    "columns": {"prediction_id": "pid", "y_true": "label", "y_pred": "pred"},
                    "thresholds": {"max_invalid_fraction": 1.0},
                }
            ]
        }
    ).audits[0]
    MIXED.drop(engine, checkfirst=True)
    MIXED.create(engine)
    with engine.begin() as connection:
        connection.execute(MIXED.insert(), rows)
    return _scans(engine, audit)


def test_rows_in_another_order_are_the_same_input(db_url):
    """It fingerprints a table written again with its rows in reverse order as before in every
    scan mode, invalid rows and rows without a prediction id included, whose quarantine records
    the push-down reads in the order the database returns them."""
    engine = make_engine(db_url)
    forward = _mixed_fingerprints(engine, MIXED_ROWS)
    assert _mixed_fingerprints(engine, MIXED_ROWS[::-1]) == forward
    engine.dispose()


def test_pushdown_fingerprint_covers_cells_and_quarantined_rows(db_url):
    """It changes every mode's fingerprint when a quarantined row changes where it broke no rule
    (its group), and only the memory and stream modes' when a valid row changes outside its cell
    (its prediction id): the push-down's cells and quarantine are then equal."""
    engine = make_engine(db_url)
    before = _mixed_fingerprints(engine, MIXED_ROWS)
    assert MIXED_ROWS[7]["pred"] == 2 and MIXED_ROWS[7]["grp"] == "B"
    regrouped = [dict(row, grp="A") if i == 7 else row for i, row in enumerate(MIXED_ROWS)]
    assert all(a != b for a, b in zip(_mixed_fingerprints(engine, regrouped).values(),
                                      before.values()))
    assert MIXED_ROWS[1]["pred"] == 1 and MIXED_ROWS[1]["pid"] == "p1"
    renamed = [dict(row, pid="q1") if i == 1 else row for i, row in enumerate(MIXED_ROWS)]
    after = _mixed_fingerprints(engine, renamed)
    engine.dispose()
    assert after["memory"] != before["memory"] and after["stream"] != before["stream"]
    assert after["pushdown"] == before["pushdown"]


ROWS = st.lists(
    st.tuples(
        st.sampled_from(["A", "B", "C"]),
        st.integers(0, 1),
        st.one_of(st.none(), st.sampled_from([0.0, 0.25, 1.0])),
        st.text(max_size=3),
    ),
    min_size=2,
    max_size=30,
)


def _frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["group", "y_pred", "score", "pid"], dtype=object)


@settings(max_examples=300, deadline=None)
@given(rows=ROWS, data=st.data())
def test_fingerprint_is_the_multiset_of_rows(rows, data):
    """It keeps the fingerprint when the rows are permuted, and changes it when one value moves
    from one row to another exactly when that changes which rows there are."""
    permuted = data.draw(st.permutations(rows))
    assert fingerprint(_frame(permuted)) == fingerprint(_frame(rows))
    i, j = data.draw(st.lists(st.integers(0, len(rows) - 1), min_size=2, max_size=2, unique=True))
    column = data.draw(st.integers(0, 3))
    moved = [list(row) for row in rows]
    moved[i][column], moved[j][column] = rows[j][column], rows[i][column]
    moved_rows = [tuple(row) for row in moved]
    same_rows = Counter(moved_rows) == Counter(rows)
    assert (fingerprint(_frame(moved_rows)) == fingerprint(_frame(rows))) == same_rows


def test_a_nan_is_other_input_than_a_null():
    """A score changed from NULL to NaN (float or Decimal, as drivers return them) is new input:
    the two are judged apart (NaN is quarantined), so the fingerprint tells them apart too."""
    from decimal import Decimal

    def frame(first, score):
        scores = pd.Series([first, score], dtype=object)
        return pd.DataFrame({"prediction_id": ["a", "b"], "score": scores})

    assert fingerprint(frame(0.5, float("nan"))) != fingerprint(frame(0.5, None))
    assert fingerprint(frame(Decimal("0.5"), Decimal("NaN"))) != fingerprint(
        frame(Decimal("0.5"), None)
    )
