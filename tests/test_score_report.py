"""The report's score section: reliability curves, ROC curves and the sentence on which definitions
of fairness hold, checked against scikit-learn, pandas and statsmodels on the rows; runs without a
score render without it."""

from __future__ import annotations

import dataclasses
import html
import io
import itertools
import re

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score, roc_curve
from statsmodels.stats.proportion import proportion_confint
from typer.testing import CliRunner

from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import list_runs
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.migrate import upgrade
from biasaudit.db.store.report_data import report_frames
from biasaudit.flows import pipeline
from biasaudit.flows.cli import app
from biasaudit.flows.ll144 import ll144_report
from biasaudit.schemas.report import ReportFrames
from biasaudit.tasks.api import audit_frame
from biasaudit.tasks.ll144 import impact_table
from biasaudit.tasks.report import render_html, render_markdown
from biasaudit.tasks.report.derive import definitions, reliability, roc_points
from biasaudit.tasks.report.text import percent

from .conftest import COMPAS
from .test_ll144 import _expected
from .test_report import assert_self_contained, laid_out_open, needs_chromium

needs_compas = pytest.mark.skipif(not COMPAS.exists(), reason=f"{COMPAS} is absent")

HOSTILE = "<i>c</i>"


def frames_of(result, **config) -> ReportFrames:
    """The report's frames of an ``audit_frame`` result, as the store would hand them over."""
    return ReportFrames(
        run={"id": 1, "audit_name": "s", "status": "succeeded", "config": config},
        counts=result.counts,
        metrics=result.metrics,
        detection=result.detection,
        planning=result.planning,
        match=result.match,
        meta=result.metametrics,
        two_group=result.two_group,
        scores=result.scores,
        calibration=result.calibration,
        thresholds=result.thresholds,
    )


def scored_rows(seed: int = 3, n: int = 3000) -> pd.DataFrame:
    """A score 1..8 over three groups (one with a hostile name that never scores 4), outcomes
    rising with the score, a tenth unlabelled; the decision is score >= 5."""
    rng = np.random.default_rng(seed)
    g = rng.choice(["a", "b", HOSTILE], n, p=[0.5, 0.35, 0.15])
    s = rng.integers(1, 9, n)
    s = np.where((g == HOSTILE) & (s == 4), 5, s)
    y = (rng.random(n) < s / 9 - 0.1 * (g == "b")).astype(float)
    y[rng.random(n) < 0.1] = np.nan
    return pd.DataFrame({"y_true": y, "y_pred": (s >= 5).astype(int), "s": s, "g": g})


@pytest.fixture(scope="module")
def scored():
    rows = scored_rows()
    result = audit_frame(rows, attributes=["g"], score="s", metrics=["fpr", "fnr", "ppr"])
    return rows, frames_of(result)


def test_roc_points_per_group_equal_scikit_learn(scored):
    """Each group's ROC points (thresholds included) are scikit-learn's roc_curve on its
    labelled rows, without dropping collinear points: a bin where the group has no row (the
    hostile group never scores 4) or only unlabelled rows adds no point."""
    rows, frames = scored
    roc = roc_points(frames)
    labelled = rows.dropna(subset=["y_true"])
    assert set(roc["group_name"]) == set(labelled["g"])
    for name, part in labelled.groupby("g"):
        fpr, tpr, cut = roc_curve(part["y_true"], part["s"], drop_intermediate=False)
        mine = roc[roc["group_name"] == name]
        np.testing.assert_allclose(mine["fpr"], fpr, atol=1e-12)
        np.testing.assert_allclose(mine["tpr"], tpr, atol=1e-12)
        np.testing.assert_array_equal(mine["threshold"], cut)
    assert 4.0 not in set(roc.loc[roc["group_name"] == HOSTILE, "threshold"])


def test_reliability_points_equal_a_pandas_groupby(scored):
    """Each group's points: per score value, the labelled rows' mean score and outcome rate and
    their count (pandas), with the exact interval of statsmodels' Clopper-Pearson."""
    rows, frames = scored
    curves = reliability(frames).set_index(["group_name", "score_bin"])
    labelled = rows.dropna(subset=["y_true"])
    expected = labelled.groupby(["g", "s"]).agg(
        mean_score=("s", "mean"), rate=("y_true", "mean"), n=("y_true", "size"),
        positives=("y_true", "sum"),
    )  # fmt: skip
    expected.index = expected.index.set_levels(expected.index.levels[1].astype(float), level=1)
    assert sorted(curves.index) == sorted(expected.index)
    got = curves.loc[expected.index]
    np.testing.assert_allclose(got["mean_score"], expected["mean_score"], atol=1e-12)
    np.testing.assert_allclose(got["observed_rate"], expected["rate"], atol=1e-12)
    assert got["labelled"].tolist() == expected["n"].tolist()
    low, high = proportion_confint(expected["positives"], expected["n"], 0.05, method="beta")
    np.testing.assert_allclose(got["rate_low"], np.nan_to_num(low, nan=0.0), atol=1e-9)
    np.testing.assert_allclose(got["rate_high"], np.nan_to_num(high, nan=1.0), atol=1e-9)


def test_the_score_section_draws_every_point_and_escapes_names(scored):
    """The page draws a reliability point per (group, bin) and an ROC polyline per group with
    its points, beside the FPR and FNR forest plots; a hostile name is escaped."""
    _, frames = scored
    page = render_html(frames)
    assert_self_contained(page)
    assert HOSTILE not in page and "&lt;i&gt;c&lt;/i&gt;" in page
    block = page.split("Score: calibration, error rates and ROC")[1].split("</details>")[0]
    figures = re.findall(r"<svg.*?</svg>", block, flags=re.DOTALL)
    labels = [re.search(r'aria-label="([^"]*)"', f).group(1) for f in figures]
    assert labels == [
        "g: reliability", "FPR: group − rest of population", "FNR: group − rest of population",
        "g: ROC",
    ]  # fmt: skip
    assert figures[0].count("<circle") == len(reliability(frames))
    lines = re.findall(r'<polyline[^>]*points="([^"]*)"', figures[3])
    roc = roc_points(frames)
    assert [len(p.split()) for p in lines] == roc.groupby("group_name", sort=False).size().tolist()


def test_a_stored_run_has_its_score_section_on_each_database(db_url, tmp_path):
    """The pipeline stores a scored run (its decision from the score) and the report read back
    from SQLite, PostgreSQL or MariaDB draws each group's ROC points as scikit-learn's roc_curve
    and its reliability points as pandas on the rows."""
    rows = scored_rows(n=1200).assign(
        prediction_id=lambda f: [f"p{i}" for i in range(len(f))],
        model_id="m",
        model_version="1",
        predicted_at=pd.Timestamp("2026-05-01", tz="UTC"),
        score=lambda f: f["s"] / 10,
    )
    load_predictions(make_engine(db_url), rows.drop(columns="s"), ["g"], "scored")
    (tmp_path / "a.toml").write_text(
        '[[audits]]\nname = "s"\nmodel = "m"\nattributes = ["g"]\nmetrics = ["fpr", "fnr"]\n'
        'decision = { score = "score", threshold = 0.5 }\n'
    )
    run = pipeline.run_audit("s", str(tmp_path / "a.toml"), db_url, pd.Timestamp("2026-06-01"))
    engine = make_engine(db_url)
    frames = report_frames(engine, run["run_id"])
    roc, curves = roc_points(frames), reliability(frames)
    labelled = rows.dropna(subset=["y_true"])
    for name, part in labelled.groupby("g"):
        fpr, tpr, _ = roc_curve(part["y_true"], part["score"], drop_intermediate=False)
        mine = roc[roc["group_name"] == name]
        np.testing.assert_allclose(mine[["fpr", "tpr"]], np.column_stack([fpr, tpr]), atol=1e-12)
        rates = part.groupby("score")["y_true"].mean()
        got = curves[curves["group_name"] == name].set_index("score_bin")["observed_rate"]
        np.testing.assert_allclose(got.loc[rates.index], rates, atol=1e-12)
    page = render_html(frames)
    assert 'aria-label="g: reliability"' in page and "<p>By g: " in page
    engine.dispose()


def _group_rows(rng, n: int, p: float) -> pd.DataFrame:
    """Scores 0.1..0.9 (1 + Binomial(8, p), tenths), each outcome drawn with its score as its
    probability: a calibrated score."""
    s = (1 + rng.binomial(8, p, n)) / 10
    return pd.DataFrame({"score": s, "y_true": (rng.random(n) < s).astype(float)})


def _audited(rows: pd.DataFrame) -> ReportFrames:
    rows = rows.assign(y_pred=(rows["score"] >= 0.5).astype(int))
    result = audit_frame(rows, attributes=["g"], score="score", metrics=["fpr", "fnr", "ppr"])
    return frames_of(result)


@pytest.fixture(scope="module")
def calibrated_apart():
    """Both groups calibrated, base rates apart (scores around 0.3 and 0.6): error rates of
    score >= 0.5 differ."""
    rng = np.random.default_rng(2016)
    rows = pd.concat(
        [_group_rows(rng, 4000, 0.25).assign(g="a"), _group_rows(rng, 4000, 0.6).assign(g="b")]
    )
    return _audited(rows)


@pytest.fixture(scope="module")
def balanced_miscalibrated():
    """Group b is group a with its scores shuffled within each side of the threshold: the same
    decisions and outcomes (equal error and selection rates), but within a side b's score says
    nothing of its outcome (calibration differs)."""
    rng = np.random.default_rng(2017)
    a = _group_rows(rng, 5000, 0.5)
    b = a.copy()
    for side in (a["score"] >= 0.5, a["score"] < 0.5):
        b.loc[side, "score"] = rng.permutation(b.loc[side, "score"].to_numpy())
    return _audited(pd.concat([a.assign(g="a"), b.assign(g="b")], ignore_index=True))


def _sentence(frames: ReportFrames) -> str:
    found = re.findall(r"<p>(By g: .*?)</p>", render_html(frames))
    assert len(found) == 1, found
    return html.unescape(found[0])


def test_calibrated_groups_with_different_error_rates(calibrated_apart):
    """The stored verdicts (no calibration test rejects, error and selection rates flagged)
    are what the sentence says, with the base rates' range from the counts."""
    frames = calibrated_apart
    assert (frames.scores["calibration_p_adjusted"] >= 0.05).all()
    error = frames.detection[frames.detection["metric"].isin(["fpr", "fnr"])]
    assert error["flagged"].any()
    sentence = _sentence(frames)
    assert (
        "calibration within groups holds as far as the data tell (no group's outcomes depart "
        "from its scores at α = 0.05, 2 tested)"
    ) in sentence
    assert "equal error rates (FPR, FNR) do not hold (" in sentence
    assert "cannot all hold when base rates differ (Chouldechova 2017; Kleinberg" in sentence
    counts = frames.counts[frames.counts["subset"] == "group"].set_index("group_name")
    prev = (counts["tp"] + counts["fn"]) / counts[["tp", "fp", "fn", "tn"]].sum(axis=1)
    low, high = prev.idxmin(), prev.idxmax()
    assert f"from {100 * prev[low]:.1f}% ({low}) to {100 * prev[high]:.1f}% ({high})" in sentence


def test_balanced_error_rates_with_different_calibration(balanced_miscalibrated):
    frames = balanced_miscalibrated
    own = frames.scores[frames.scores["reference"] == "rest"].set_index("group_name")
    assert own.loc["a", "calibration_p_adjusted"] >= 0.05  # a's scores are its outcomes' chances
    assert own.loc["b", "calibration_p_adjusted"] < 0.05  # b's, shuffled, are not
    tested = frames.detection[frames.detection["p_adjusted"].notna()]
    assert not tested["flagged"].any() and (tested["decision"] == "fair").all()
    sentence = _sentence(frames)
    assert "calibration within groups does not hold (1 of 2 groups' outcomes depart" in sentence
    assert "equal error rates (FPR, FNR) hold within ±5.00 pp (all 2 intervals inside)" in sentence
    assert "equal selection rates (PPR) hold within ±5.00 pp (all 1 intervals inside)" in sentence
    prev = frames.counts.loc[frames.counts["subset"] == "group", ["tp", "fn"]].sum(axis=1)
    assert prev.nunique() == 1  # the same outcomes: one base rate
    assert sentence.endswith(f"and here every group's is {percent(prev.iloc[0] / 5000)}.")


def test_the_sentence_follows_the_stored_verdicts_not_the_data(calibrated_apart):
    """The same run with its stored verdicts changed (calibration rejected, no comparison
    flagged and every interval inside, selection rates not tested) says so."""
    frames = calibrated_apart
    detection = frames.detection[frames.detection["metric"] != "ppr"].assign(
        flagged=False, decision="fair"
    )
    changed = dataclasses.replace(
        frames,
        scores=frames.scores.assign(calibration_p_adjusted=0.001),
        detection=detection,
    )
    stated = definitions(changed).iloc[0]
    assert (stated["calibration"], stated["error"], stated["selection"]) == (
        "fails", "holds", "untested",
    )  # fmt: skip
    sentence = _sentence(changed)
    assert "calibration within groups does not hold (2 of 2 groups'" in sentence
    assert "equal error rates (FPR, FNR) hold within" in sentence
    assert "equal selection rates were not tested" in sentence


def _markdown_sentences(frames: ReportFrames) -> list[str]:
    """The bullets under the markdown artifact's definitions heading, markdown and HTML escapes
    undone."""
    lines = render_markdown(frames).splitlines()
    start = lines.index("## Which definitions of fairness hold") + 2
    bullets = itertools.takewhile(lambda line: line.startswith("- "), lines[start:])
    return [html.unescape(re.sub(r"\\(.)", r"\1", line[2:])) for line in bullets]


def test_the_markdown_artifact_states_the_sentence(calibrated_apart, balanced_miscalibrated):
    """The Prefect markdown artifact says which definitions hold in the HTML report's words, for
    verdicts either way (calibrated with unequal error rates, and the reverse)."""
    for frames in (calibrated_apart, balanced_miscalibrated):
        assert _markdown_sentences(frames) == [_sentence(frames)]
    assert "calibration within groups holds" in _markdown_sentences(calibrated_apart)[0]
    assert "error rates (FPR, FNR) hold" in _markdown_sentences(balanced_miscalibrated)[0]


def test_groups_without_outcomes_or_comparisons_render():
    """A group without positives, a group without labels, and an attribute of one group (nothing
    to compare: every definition untested, no range of base rates) render."""
    rng = np.random.default_rng(1)
    rows = pd.DataFrame(
        {"g": rng.choice(["a", "b", "none", "unlabelled"], 400), "one": "only",
         "s": rng.integers(1, 4, 400).astype(float), "y_true": rng.integers(0, 2, 400) * 1.0}
    )  # fmt: skip
    rows.loc[rows["g"] == "none", "y_true"] = 0.0
    rows.loc[rows["g"] == "unlabelled", "y_true"] = np.nan
    rows["y_pred"] = (rows["s"] >= 2).astype(int)
    frames = frames_of(audit_frame(rows, attributes=["g", "one"], score="s", metrics=["fpr"]))
    page = render_html(frames)
    assert_self_contained(page)
    assert set(roc_points(frames)["group_name"]) == {"a", "b", "only"}  # need both outcomes
    assert (
        "<p>By one: equal calibration across groups was not tested, equal error rates were not "
        "tested and equal selection rates were not tested; these definitions cannot all hold "
        "when base rates differ (Chouldechova 2017; Kleinberg, Mullainathan and Raghavan "
        "2016).</p>"
    ) in page


def test_a_run_without_a_score_renders_as_before(scored):
    """Without stored score results there is no score section, and the page is the one the
    frames render without score frames at all."""
    rows, _ = scored
    result = audit_frame(rows, attributes=["g"], metrics=["fpr", "fnr", "ppr"])
    assert result.calibration.empty and result.thresholds.empty
    frames = frames_of(result)
    page = render_html(frames)
    bare = dataclasses.replace(
        frames, scores=pd.DataFrame(), calibration=pd.DataFrame(), thresholds=pd.DataFrame()
    )
    assert page == render_html(bare)
    assert "Score:" not in page and "reliability" not in page and "ROC" not in page
    assert "definitions of fairness" not in render_markdown(frames)
    assert definitions(frames).empty and roc_points(frames).empty and reliability(frames).empty


COMPAS_AUDIT = """[[audits]]
name = "compas"
model = "compas"
source = "compas"
attributes = ["race", "sex"]
intersections = [["race", "sex"]]
metrics = ["fpr", "fnr", "ppr"]
reference_groups = { race = "Caucasian" }
decision = { score = "decile_score", threshold = 5 }
columns = { prediction_id = "id", predicted_at = "compas_screening_date", y_true = "two_year_recid" }
"""


@needs_compas
@pytest.mark.usefixtures("prefect_harness")
def test_compas_decile_score_through_biasaudit_run(tmp_path, monkeypatch):
    """ProPublica's file loaded as it is (every column text) and audited by ``biasaudit run`` (a
    Prefect flow run) with the decile score as the score (docs/configuration.md's example): the
    stored recidivism per decile and race, AUC per race, FPR and FNR at every decile threshold,
    the report's ROC points and the Local Law 144 tables equal pandas and scikit-learn on the
    CSV; the report has the score section of each attribute."""
    raw = pd.read_csv(COMPAS)
    url = f"sqlite:///{tmp_path / 'compas.db'}"
    upgrade(url)
    engine = make_engine(url)
    pd.read_csv(COMPAS, dtype=str).to_sql("compas", engine, index=False)
    (tmp_path / "audits.toml").write_text(COMPAS_AUDIT)
    monkeypatch.setenv("BIASAUDIT_REPORTS_DIR", str(tmp_path / "reports"))
    args = ["-c", str(tmp_path / "audits.toml"), "--db", url, "--as-of", "2015-01-01"]
    result = CliRunner().invoke(app, ["run", "compas", *args])
    assert result.exit_code == 0, result.output
    run_id = int(list_runs(engine)["id"].iloc[0])
    frames = report_frames(engine, run_id)

    rates = frames.calibration.set_index(["attribute", "group_name", "score_bin"])
    expected = raw.groupby(["race", "decile_score"])["two_year_recid"].agg(["mean", "size"])
    got = rates.loc[[("race", r, float(d)) for r, d in expected.index]]
    np.testing.assert_allclose(got["observed_rate"], expected["mean"], atol=1e-12)
    assert got["labelled"].tolist() == expected["size"].tolist()
    scores = frames.scores[(frames.scores["attribute"] == "race")]
    auc = scores[scores["reference"] == "rest"].set_index("group_name")["auc_group"]
    sweep = frames.thresholds.set_index(["attribute", "group_name", "threshold"])
    roc = roc_points(frames)
    for race, part in raw.groupby("race"):
        truth = part["two_year_recid"] == 1
        assert auc[race] == pytest.approx(roc_auc_score(truth, part["decile_score"]), abs=1e-9)
        for decile in range(1, 11):
            chosen = part["decile_score"] >= decile
            at = sweep.loc[("race", race, float(decile))]
            assert at["fpr"] == pytest.approx((chosen & ~truth).sum() / (~truth).sum(), abs=1e-12)
            assert at["fnr"] == pytest.approx((~chosen & truth).sum() / truth.sum(), abs=1e-12)
        fpr, tpr, _ = roc_curve(truth, part["decile_score"], drop_intermediate=False)
        mine = roc[(roc["attribute"] == "race") & (roc["group_name"] == race)]
        np.testing.assert_allclose(mine[["fpr", "tpr"]], np.column_stack([fpr, tpr]), atol=1e-12)
    every = frames.scores  # Asian x Female is 2 rows: AUC 1, its interval up to 1
    assert (every["auc_low_group"] <= every["auc_group"]).all()
    assert (every["auc_group"] <= every["auc_high_group"]).all()
    shown = CliRunner().invoke(app, ["history", str(run_id), "--all", "--db", url])
    assert shown.exit_code == 0, shown.output
    table = shown.output[shown.output.index("score: AUC") :].splitlines()
    for race, part in raw.groupby("race"):  # `history --all` shows each AUC against the rest
        value = roc_auc_score(part["two_year_recid"], part["decile_score"])
        line = next(x for x in table if re.match(rf"│ race +│ {race} +│ rest ", x))
        assert f" {value:.4g} " in line, line

    _, csv = ll144_report(engine, run_id)
    tables = pd.read_csv(io.StringIO(csv)).set_index(["attribute", "group_name"]).sort_index()
    above = _expected(raw, raw["decile_score"] > raw["decile_score"].median())
    assert tables.index.equals(above.index)
    assert tables[["n", "selected"]].values.tolist() == above[["n", "selected"]].values.tolist()
    np.testing.assert_allclose(tables["impact_ratio"], above["impact_ratio"], atol=1e-12)

    page = (tmp_path / "reports" / f"compas-run-{run_id}.html").read_text()
    assert_self_contained(page)
    for attribute in ("race", "sex", "race x sex"):
        assert f'aria-label="{attribute}: reliability"' in page
        assert f'aria-label="{attribute}: ROC"' in page
        assert f"<p>By {attribute}: equal calibration across groups " in page
    engine.dispose()


def _scored_compas(raw: pd.DataFrame) -> pd.DataFrame:
    """ProPublica's rows as audit_frame takes them, the decile score as the score."""
    return pd.DataFrame(
        {
            "y_true": raw["two_year_recid"].astype(float),
            "y_pred": (raw["score_text"] != "Low").astype(int),
            "decile_score": raw["decile_score"],
            "race": raw["race"],
            "sex": raw["sex"],
        }
    )


@needs_compas
def test_compas_scoring_tables_through_the_api():
    """audit_frame with the decile score: its Local Law 144 scoring counts give the tables of
    rows scoring above the median, per race, sex and race x sex, that pandas gives."""
    raw = pd.read_csv(COMPAS)
    frame = _scored_compas(raw)
    result = audit_frame(
        frame, attributes=["race", "sex"], intersections=[["race", "sex"]], metrics=["fpr"],
        score="decile_score",
    )  # fmt: skip
    tables = impact_table(result.scoring.rename(columns={"above_median": "selected"}))
    tables = tables.set_index(["attribute", "group_name"]).sort_index()
    above = _expected(raw, raw["decile_score"] > raw["decile_score"].median())
    assert tables.index.equals(above.index)
    assert tables[["n", "selected"]].values.tolist() == above[["n", "selected"]].values.tolist()
    np.testing.assert_allclose(tables["rate"], above["rate"], atol=1e-12)
    np.testing.assert_allclose(tables["impact_ratio"], above["impact_ratio"], atol=1e-12)


@needs_compas
@needs_chromium
def test_a_scored_compas_page_fits_the_window_in_headless_chromium(tmp_path):
    """With every section and detail open, the score blocks of race, sex and race x sex (12
    groups: dashed colours after the eighth) keep the page within Chromium's 1,400 px window."""
    raw = pd.read_csv(COMPAS)
    frame = _scored_compas(raw)
    result = audit_frame(
        frame, attributes=["race", "sex"], intersections=[["race", "sex"]],
        reference_groups={"race": "Caucasian"}, metrics=["fpr", "fnr", "ppr"],
        score="decile_score",
    )  # fmt: skip
    frames = frames_of(result, reference_groups={"race": "Caucasian"})
    measure = laid_out_open(render_html(frames), tmp_path)
    assert measure["width"] <= 1400, measure["width"]
    assert "By race x sex: equal calibration across groups" in measure["text"]
