"""Local Law 144 tables (tasks.ll144, flows.ll144): rates and impact ratios per sex, race and their
intersection, checked against pandas on the rows of COMPAS."""

import html
import io
import re
from datetime import datetime

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import Column, DateTime, Double, Integer, MetaData, String, Table, text
from typer.testing import CliRunner

from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import get_run
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.migrate import upgrade
from biasaudit.flows.cli import app
from biasaudit.flows.ll144 import ll144_report
from biasaudit.flows.pipeline import run_audit
from biasaudit.tasks.ll144 import FOUR_FIFTHS, impact_table, weighted_median

from .conftest import COMPAS


@pytest.mark.parametrize("values", [[1, 2, 2, 3], [5, 1, 1, 1, 9], [3], [1, 10, 4, 4, 4, 7]])
def test_weighted_median_is_the_median_of_the_rows(values):
    distinct, counts = np.unique(values, return_counts=True)
    assert weighted_median(distinct, counts) == np.median(values)


def test_impact_ratios_leave_out_small_categories_only_from_the_ratios():
    groups = pd.DataFrame(
        {
            "attribute": "race",
            "group_name": ["a", "b", "tiny"],
            "n": [600, 390, 10],
            "selected": [300, 117, 9],
        }
    )
    table = impact_table(groups).set_index("group_name")
    assert table.loc["tiny", "rate"] == 0.9 and not table.loc["tiny", "in_ratios"]
    assert np.isnan(table.loc["tiny", "impact_ratio"])
    assert table.loc["a", "impact_ratio"] == 1.0  # highest among the categories kept
    assert table.loc["b", "impact_ratio"] == pytest.approx(0.3 / 0.5)


def test_the_two_percent_share_is_of_every_row_audited():
    """A category's share, for the 2% rule, is of every row audited, those of an unknown category
    included (the rule speaks of the data audited): 20 of 1,000 known rows is 2.0% of the known
    categories but 20/1,100 = 1.8% of the rows audited with 100 unknown, so it is left out."""
    groups = pd.DataFrame(
        {"attribute": "race", "group_name": ["a", "b", "tiny"], "n": [500, 480, 20],
         "selected": [250, 240, 19]}
    )  # fmt: skip
    table = impact_table(groups, audited={"race": 1100}).set_index("group_name")
    assert table.loc["tiny", "share"] == pytest.approx(20 / 1100)
    assert not table.loc["tiny", "in_ratios"] and np.isnan(table.loc["tiny", "impact_ratio"])
    assert table.loc["a", "share"] == pytest.approx(500 / 1100)
    assert table.loc["a", "impact_ratio"] == 1.0
    kept = impact_table(groups).set_index("group_name")  # no unknown rows: the tables' rows
    assert kept.loc["tiny", "in_ratios"] and kept.loc["tiny", "impact_ratio"] == 1.0
    assert kept.loc["a", "impact_ratio"] == pytest.approx(0.5 / 0.95)  # tiny's 19/20 the highest


def test_api_scoring_median_is_over_every_row_unknown_categories_included():
    """result.scoring counts above the median of every finite score of the frame, the rows of an
    unknown category (quarantined, not in the tables) included, as the documented definition
    and the database scan do; sample_size is their number (pandas on the rows)."""
    import warnings

    from biasaudit import audit_frame

    rng = np.random.default_rng(40)
    n = 600
    frame = pd.DataFrame(
        {
            "y_true": rng.integers(0, 2, n).astype(float),
            "y_pred": rng.integers(0, 2, n),
            "score": rng.random(n),
            "race": rng.choice(["A", "B"], n),
        }
    )
    frame.loc[frame.nlargest(100, "score").index, "race"] = ""  # the top scores: unknown race
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = audit_frame(frame, attributes=["race"], score="score")
    median = float(frame["score"].median())  # every row's score
    known = frame[frame["race"] != ""]
    assert median > float(known["score"].median())  # the known rows' median is another number
    scoring = result.scoring.set_index("group_name")
    assert (scoring["median_score"] == median).all() and (scoring["sample_size"] == n).all()
    above = (known["score"] > median).groupby(known["race"]).sum()
    assert scoring["above_median"].sort_index().tolist() == above.sort_index().tolist()
    assert scoring["n"].sort_index().tolist() == known["race"].value_counts().sort_index().tolist()


def test_a_configured_threshold_shows_its_selection_rate_beside_the_median_split(db_url, tmp_path):
    """With a decision's threshold configured, the page and the CSV give, beside the scoring rate
    (above the median), each category's selection rate at the threshold (score >= 1.0, pandas on
    the rows) and its impact ratio, categories under 2% of the rows audited left out."""
    engine = make_engine(db_url)
    rows = _scored_source(engine)
    (tmp_path / "a.toml").write_text(
        '[[audits]]\nname = "s"\nmodel = "m"\nsource = "scored_ll144"\n'
        'attributes = ["race", "sex"]\nintersections = [["race", "sex"]]\nmetrics = ["fpr"]\n'
        'decision = { score = "score", threshold = 1.0 }\n'
        'columns = { prediction_id = "pid", model_id = "model", predicted_at = "at", '
        'y_true = "label" }\n'
    )
    run = run_audit("s", str(tmp_path / "a.toml"), db_url, pd.Timestamp("2026-06-01", tz="UTC"))
    page, csv = ll144_report(engine, run["run_id"])
    audited = rows.iloc[: len(rows) - 3].dropna(subset=["score"])
    audited = audited[audited["race"] != ""]
    expected = _expected(audited, audited["score"] >= 1.0, len(audited) + 7)
    got = pd.read_csv(io.StringIO(csv), keep_default_na=False).set_index(
        ["attribute", "group_name"]
    ).sort_index()
    assert got["selected_at_threshold"].tolist() == expected["selected"].tolist()
    np.testing.assert_allclose(got["rate_at_threshold"], expected["rate"], atol=1e-12)
    np.testing.assert_allclose(
        got["impact_ratio_at_threshold"].replace("", np.nan).astype(float),
        expected["impact_ratio"],
        atol=1e-12,
    )
    assert "Selection rate at the configured threshold: the share of a category with a score at or above 1.0" in page
    assert "Selection rate at score ≥ 1.0" in page
    engine.dispose()


def _expected(raw: pd.DataFrame, chosen: pd.Series, audited: int | None = None) -> pd.DataFrame:
    """Per category its rows, selected rows, rate and impact ratio, categories under 2% of the
    ``audited`` rows (every row of the tables and those of an unknown category; default the
    tables' rows) left out of the ratios."""
    parts = []
    race_sex = raw["race"] + " x " + raw["sex"]
    for attribute, key in (("race", raw["race"]), ("sex", raw["sex"]), ("race x sex", race_sex)):
        n, selected = key.value_counts(), chosen.groupby(key).sum()
        frame = pd.DataFrame({"n": n, "selected": selected}).rename_axis("group_name")
        frame["rate"] = frame["selected"] / frame["n"]
        kept = frame["n"] / (audited or frame["n"].sum()) >= 0.02
        frame["impact_ratio"] = (frame["rate"] / frame.loc[kept, "rate"].max()).where(kept)
        parts.append(frame.reset_index().assign(attribute=attribute))
    return pd.concat(parts).set_index(["attribute", "group_name"]).sort_index()


@pytest.mark.skipif(not COMPAS.exists(), reason=f"{COMPAS} is absent")
@pytest.mark.parametrize("scores", [False, True])
def test_compas_ll144_tables_equal_the_rows(tmp_path, scores):
    """Selection rates (Medium or High) or scoring rates (decile above the sample's median), and
    impact ratios with categories under 2% left out, per race, sex and race x sex."""
    from .test_compas import compas_predictions

    url = f"sqlite:///{tmp_path / 'compas.db'}"
    upgrade(url)
    load_predictions(make_engine(url), compas_predictions(), ["race", "sex"], "compas")
    decision = 'decision = { score = "score", threshold = 0.5 }\n' if scores else ""
    (tmp_path / "a.toml").write_text(
        '[[audits]]\nname = "c"\nmodel = "compas"\nattributes = ["race", "sex"]\n'
        f'intersections = [["race", "sex"]]\nmetrics = ["fpr"]\n{decision}'
    )
    run = run_audit("c", str(tmp_path / "a.toml"), url, pd.Timestamp("2015-01-01", tz="UTC"))
    engine = make_engine(url)
    page, csv = ll144_report(engine, run["run_id"])
    got = pd.read_csv(pd.io.common.StringIO(csv)).set_index(["attribute", "group_name"])
    raw = pd.read_csv(COMPAS)
    chosen = (
        raw["decile_score"] > raw["decile_score"].median() if scores else raw["score_text"] != "Low"
    )
    expected = _expected(raw, chosen)
    got = got.sort_index()
    assert got.index.equals(expected.index)
    assert got["n"].tolist() == expected["n"].tolist()
    assert got["selected"].tolist() == expected["selected"].tolist()
    np.testing.assert_allclose(got["rate"], expected["rate"], atol=1e-12)
    np.testing.assert_allclose(got["impact_ratio"], expected["impact_ratio"], atol=1e-12)
    assert ("Scoring rate" in page) == scores
    assert "left out of the impact ratios" in page and "race Asian" in page
    finished = get_run(engine, run["run_id"]).finished_at.date().isoformat()
    assert (
        f"Date of the audit: {finished}. Period of the data: the first prediction to 2015-01-01."
        in page
    )
    assert "Individuals in unknown categories (not in any table above): race: 0; sex: 0" in page
    assert html.escape(FOUR_FIFTHS) in page
    result = CliRunner().invoke(
        app, ["report", str(run["run_id"]), "--format", "ll144", "--out", str(tmp_path / "l.html"),
              "--db", url]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "l.csv").read_text() == csv
    engine.dispose()


def _scored_source(engine) -> pd.DataFrame:
    """A continuous score (0.00..1.99, ties at the median) with rows the audit leaves out of the
    tables but not out of the sample (an unknown race, a repeated id) or out of both (no score)."""
    rng = np.random.default_rng(144)
    n = 1001
    rows = pd.DataFrame(
        {
            "pid": [f"p{i}" for i in range(n)],
            "model": "m",
            "at": datetime(2026, 5, 1),
            "label": np.where(rng.random(n) < 0.2, np.nan, rng.integers(0, 2, n)),
            "score": rng.integers(0, 200, n) / 100,
            "race": rng.choice(["A", "B", "C"], n, p=[0.5, 0.3, 0.2]),
            "sex": rng.choice(["F", "M"], n),
        }
    )
    rows.loc[:6, "race"] = ""  # unknown category: in the sample, not in the tables
    rows.loc[7:9, "score"] = np.nan  # no score: in neither
    rows = pd.concat([rows, rows.iloc[[20, 21, 22]]], ignore_index=True)  # ids repeated: the copies
    table = Table(
        "scored_ll144",
        MetaData(),
        Column("pid", String(20)),
        Column("model", String(10)),
        Column("at", DateTime),
        Column("label", Integer),
        Column("score", Double),
        Column("race", String(10)),
        Column("sex", String(10)),
    )
    table.create(engine)
    records = rows.astype(object).where(rows.notna(), None).to_dict("records")
    with engine.begin() as connection:
        connection.execute(table.insert(), records)
    return rows


@pytest.mark.parametrize("mode", ["memory", "stream", "pushdown"])
def test_continuous_scoring_rates_count_above_the_exact_median(db_url, tmp_path, mode):
    """A continuous score: the scoring rate is the share of a category strictly above the median
    of every score read (pandas on the rows), in every scan mode, and the page states that
    median. A run stored without its scoring counts states the bin edge it counts from."""
    engine = make_engine(db_url)
    rows = _scored_source(engine)
    (tmp_path / "a.toml").write_text(
        '[[audits]]\nname = "s"\nmodel = "m"\nsource = "scored_ll144"\n'
        'attributes = ["race", "sex"]\nintersections = [["race", "sex"]]\nmetrics = ["fpr"]\n'
        'decision = { score = "score", threshold = 1.0 }\n'
        'columns = { prediction_id = "pid", model_id = "model", predicted_at = "at", '
        'y_true = "label" }\n'
        f'[audits.scan]\nmode = "{mode}"\nchunk_rows = 1000\n'
    )
    run = run_audit("s", str(tmp_path / "a.toml"), db_url, pd.Timestamp("2026-06-01", tz="UTC"))
    page, csv = ll144_report(engine, run["run_id"])
    median = float(rows["score"].median())  # every score read, the left-out rows' included
    audited = rows.iloc[: len(rows) - 3].dropna(subset=["score"])
    audited = audited[audited["race"] != ""]
    got = pd.read_csv(io.StringIO(csv), keep_default_na=False).set_index(
        ["attribute", "group_name"]
    )
    expected = _expected(audited, audited["score"] > median, len(audited) + 7)  # 7 unknown races
    assert (rows["score"] == median).sum() > 0  # rows at the median are not above it
    assert got.sort_index().index.equals(expected.index)
    assert got.sort_index()["selected"].tolist() == expected["selected"].tolist()
    assert got.sort_index()["n"].tolist() == expected["n"].tolist()
    assert (
        html.escape(f"strictly above {median!r}, the median of the sample's 1,001 scores") in page
    )
    assert "10 of them in rows not in the tables" in page  # 7 unknown races, 3 copies
    with engine.begin() as connection:  # as a run stored before its scoring counts
        connection.execute(text(f"DELETE FROM scoring_results WHERE run_id = {run['run_id']}"))
    page, csv = ll144_report(engine, run["run_id"])
    stated = re.search(r"scoring at or above ([0-9.]+), the first score bin edge", page)
    assert stated and "stored its score counts per bin only" in page
    got = pd.read_csv(io.StringIO(csv), keep_default_na=False).set_index(
        ["attribute", "group_name"]
    )
    expected = _expected(audited, audited["score"] >= float(stated.group(1)))
    assert got.sort_index()["selected"].tolist() == expected["selected"].tolist()
    engine.dispose()
