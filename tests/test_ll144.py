"""Local Law 144 tables (tasks.ll144, flows.ll144): rates and impact ratios per sex, race and their
intersection, checked against pandas on the rows of COMPAS."""

import html

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from biasaudit.db.engine import make_engine
from biasaudit.db.load import load_predictions
from biasaudit.db.migrate import upgrade
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


def _expected(raw: pd.DataFrame, chosen: pd.Series) -> pd.DataFrame:
    parts = []
    race_sex = raw["race"] + " x " + raw["sex"]
    for attribute, key in (("race", raw["race"]), ("sex", raw["sex"]), ("race x sex", race_sex)):
        n, selected = key.value_counts(), chosen.groupby(key).sum()
        frame = pd.DataFrame({"n": n, "selected": selected}).rename_axis("group_name")
        frame["rate"] = frame["selected"] / frame["n"]
        kept = frame["n"] / frame["n"].sum() >= 0.02
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
    assert "Period of the data: the first prediction to 2015-01-01." in page
    assert "Individuals in unknown categories (not in any table above): race: 0; sex: 0" in page
    assert html.escape(FOUR_FIFTHS) in page
    result = CliRunner().invoke(
        app, ["report", str(run["run_id"]), "--format", "ll144", "--out", str(tmp_path / "l.html"),
              "--db", url]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "l.csv").read_text() == csv
    engine.dispose()
