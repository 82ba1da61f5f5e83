"""End to end: predictions in a database become versioned audit runs (SQLite and PostgreSQL)."""

import re
from datetime import timedelta

import pandas as pd
import pytest
from sqlalchemy import func, select, text

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.catalogue import SourceError
from biasaudit.db.store.history import list_runs, run_metrics
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.models import (
    AuditRun,
    MatchResult,
    MetaMetricResult,
    MetricResult,
    PlanningResult,
    QuarantinedRow,
)
from biasaudit.db.store.report_data import report_frames
from biasaudit.flows.audit import audit_flow
from biasaudit.flows.demo import END, GROUPS, INJECTED, synthetic_predictions
from biasaudit.flows.nightly import nightly_flow
from biasaudit.schemas.quarantine import NoValidRows, TooManyInvalidRows
from biasaudit.tasks.report.markdown import md, render_markdown
from biasaudit.tasks.report.page import esc, render_html

from .conftest import DEMO_CONFIG, on_databases

pytestmark = pytest.mark.usefixtures("prefect_harness")


# The whole demo (four audits of about 9,000 rows each, twice) is an end-to-end run of over 20 s
# on each store, SQLite too (98 s on two shared cores, the longest of the fast set): slow.
@pytest.mark.slow
def test_demo_audits_are_versioned_and_idempotent(db_url):
    """It audits every demo model, returns the same run for unchanged input, versions new input."""
    engine = make_engine(db_url)
    data = synthetic_predictions()
    report = load_predictions(engine, data, list(GROUPS), "demo")
    assert report.inserted == len(data) and report.quarantined == 0

    results = nightly_flow(str(DEMO_CONFIG), db_url, END)
    runs = list_runs(engine)
    assert len(runs) == 4 and set(runs["status"]) == {"succeeded"} and set(runs["version"]) == {1}

    credit = runs.set_index("audit_name").loc["credit-race"]
    window = data[data["model_id"] == "credit-scorer"]
    assert credit["rows_read"] == credit["rows_valid"] == len(window)
    metrics = run_metrics(engine, int(credit["id"]), attribute="race", metric="fpr")
    rest = run_metrics(engine, int(credit["id"]), attribute="race", metric="fpr", subset="rest")
    gap = metrics.set_index("group_name")["value"] - rest.set_index("group_name")["value"]
    ((_, _, group, _, delta),) = [i for i in INJECTED if i[0] == "credit-scorer"]
    assert gap.idxmax() == group and gap.max() > delta / 2

    with engine.connect() as connection:
        stored = dict(
            connection.execute(
                select(MetricResult.estimator, func.count())
                .where(MetricResult.run_id == int(credit["id"]))
                .group_by(MetricResult.estimator)
            ).all()
        )
        match_rows = connection.scalar(
            select(func.count())
            .select_from(MatchResult)
            .where(MatchResult.run_id == int(credit["id"]))
        )
    assert stored["cps"] == stored["additive"] == stored["raw"] / 2  # smoothed: groups only
    groups = run_metrics(engine, int(credit["id"]), metric="tpr")
    pairs = len(groups) + (groups["attribute"] == "race").sum() - 1  # vs rest, and vs White
    assert match_rows == pairs * 6  # six of the configured metrics have a MATCH form

    flagged = {
        audit: {line.split(" than ")[0] for line in summary["flagged"]}
        for audit, summary in stored_summaries(engine).items()
    }
    assert "race=Black fpr higher" in flagged["credit-race"]
    assert "sex=Female tpr lower" in flagged["hiring-sex"]
    assert "age_band=65+ tpr lower" in flagged["claims-recent"]
    assert flagged["fraud-all"] == set()  # the truly fair model

    with engine.connect() as connection:
        planning = pd.read_sql(
            select(PlanningResult).where(PlanningResult.run_id == int(credit["id"])), connection
        )
        meta = pd.read_sql(
            select(MetaMetricResult).where(MetaMetricResult.run_id == int(credit["id"])), connection
        )
    black_fpr = planning.set_index(["group_name", "reference", "metric"]).loc[
        ("Black", "rest", "fpr")
    ]
    # power of detection's test against planning τ = tolerance + 0.05 at its adjusted level α/m
    assert black_fpr["verdict"] == "enough data" and black_fpr["achieved_power"] > 0.9
    assert len(planning) == pairs * 6  # every comparison and configured rate metric
    assert set(meta["attribute"]) == {"race", "sex", "age_band", "race x sex"}
    race_fpr = meta.set_index(["attribute", "metric"]).loc[("race", "fpr")]
    # meta-metrics keep the groups whose FPR denominator (labelled negatives) reaches
    # min_group_size (30 by default): counted from the rows
    negatives = window[window["y_true"] == 0].groupby("race").size()
    assert race_fpr["k"] == int((negatives >= 30).sum()) >= 2
    assert race_fpr["corrected_var"] <= race_fpr["var"]
    assert race_fpr["interval_low"] <= race_fpr["corrected_var"] <= race_fpr["interval_high"]

    again = audit_flow("credit-race", str(DEMO_CONFIG), db_url, END)
    assert again == {**results[0], "new": False}

    late = (
        data[data["model_id"] == "credit-scorer"]
        .head(50)
        .assign(
            prediction_id=lambda f: "late-" + f["prediction_id"],
            predicted_at=END - timedelta(hours=1),
        )
    )
    load_predictions(engine, late, list(GROUPS), "late")
    newer = audit_flow("credit-race", str(DEMO_CONFIG), db_url, END)
    assert newer["new"] and newer["run_id"] != results[0]["run_id"]
    versions = list_runs(engine, audit="credit-race")["version"].tolist()
    assert versions == [2, 1]


def stored_summaries(engine):
    with engine.connect() as connection:
        return dict(connection.execute(select(AuditRun.audit_name, AuditRun.summary)).all())


def write_config(tmp_path, **audit):
    lines = ["[[audits]]"] + [f"{k} = {v!r}".replace("'", '"') for k, v in audit.items()]
    path = tmp_path / "audits.toml"
    path.write_text("\n".join(lines).replace("True", "true"))
    return str(path)


def test_failed_run_is_recorded_without_results(db_url, tmp_path):
    """It records a failed run with its error, and no results become visible."""
    config = write_config(
        tmp_path, name="ghost", model="m", source="no_such_table", attributes=["race"]
    )
    with pytest.raises(SourceError):
        audit_flow("ghost", config, db_url, END)
    engine = make_engine(db_url)
    runs = list_runs(engine)
    assert runs["status"].tolist() == ["failed"] and runs["version"].isna().all()
    assert "no_such_table" in runs["error"].iloc[0]
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(MetricResult)) == 0


def make_custom_source(url, bad_share):
    """A plain table with its own column names, some predictions out of {0, 1}."""
    engine = make_engine(url)
    n = 40
    frame = pd.DataFrame(
        {
            "case_no": [f"c{i}" for i in range(n)],
            "decided": pd.Timestamp("2026-10-01", tz="UTC").tz_convert(None),
            "label": [i % 2 for i in range(n)],
            "decision": [2 if i < bad_share * n else (i // 2) % 2 for i in range(n)],
            "region": ["north" if i % 3 else "south" for i in range(n)],
        }
    )
    frame.to_sql("decisions", engine, index=False, if_exists="replace")
    return engine


@pytest.mark.parametrize(("limit", "fails"), [(0.1, True), (0.5, False)])
def test_custom_source_mapping_and_quarantine(db_url, tmp_path, limit, fails):
    """It reads a table through a column mapping and quarantines bad rows with the run."""
    engine = make_custom_source(db_url, bad_share=0.25)
    config = tmp_path / "audits.toml"
    config.write_text(
        f"""
[[audits]]
name = "decisions"
model = "rules-engine"
source = "decisions"
attributes = ["region"]
metrics = ["tpr", "fpr"]
columns = {{ prediction_id = "case_no", predicted_at = "decided", y_true = "label", y_pred = "decision" }}
thresholds = {{ max_invalid_fraction = {limit} }}
"""
    )
    if fails:
        with pytest.raises(TooManyInvalidRows, match="10 of 40 rows"):
            audit_flow("decisions", str(config), db_url, END)
    else:
        audit_flow("decisions", str(config), db_url, END)
    run = list_runs(engine).iloc[0]
    assert run["status"] == ("failed" if fails else "succeeded")
    assert (run["rows_read"], run["rows_quarantined"]) == (40, 10)
    with engine.connect() as connection:
        rows = connection.execute(
            select(QuarantinedRow.run_id, QuarantinedRow.column_name, QuarantinedRow.value)
        ).all()
    assert len(rows) == 10 and {r[1:] for r in rows} == {("y_pred", "2")}
    assert {r[0] for r in rows} == {int(run["id"])}


@on_databases("sqlite")
@pytest.mark.parametrize("mode", ["memory", "stream", "pushdown"])
@pytest.mark.parametrize("limit", [0.05, 1.0])
def test_labels_spelled_yes_no_fail_the_run_naming_the_column(db_url, tmp_path, mode, limit):
    """It fails a run whose labels are all spelled yes/no with one line naming the column and
    the accepted values, whatever max_invalid_fraction allows (never an internal error), and
    keeps the quarantined rows with the run."""
    from biasaudit.flows.pipeline import run_audit

    engine = make_engine(db_url)
    n = 30
    pd.DataFrame(
        {
            "case_no": [f"c{i}" for i in range(n)],
            "decided": pd.Timestamp("2026-10-01"),
            "label": ["yes" if i % 2 else "no" for i in range(n)],
            "decision": [(i // 2) % 2 for i in range(n)],
            "region": ["north" if i % 3 else "south" for i in range(n)],
        }
    ).to_sql("decisions", engine, index=False)
    config = tmp_path / "audits.toml"
    config.write_text(
        '[[audits]]\nname = "yn"\nmodel = "m"\nsource = "decisions"\nattributes = ["region"]\n'
        'columns = { prediction_id = "case_no", predicted_at = "decided", y_true = "label", '
        'y_pred = "decision" }\n'
        f"thresholds = {{ max_invalid_fraction = {limit} }}\nscan = {{ mode = {mode!r} }}\n"
    )
    expected = (
        re.escape(
            "all 30 rows failed validation: nothing to audit; no value of column 'y_true' is "
            "accepted (binary: 0/1 or true/false; e.g. "
        )
        + "'(yes|no)'"
        + re.escape("); see quarantined_rows")
        + "$"
    )
    with pytest.raises(NoValidRows, match=expected):
        run_audit("yn", str(config), db_url, END)
    run = list_runs(engine).iloc[0]
    assert run["status"] == "failed" and (run["rows_read"], run["rows_quarantined"]) == (30, 30)
    with engine.connect() as connection:
        rules = connection.execute(select(QuarantinedRow.column_name, QuarantinedRow.rule)).all()
    assert len(rules) == 30 and set(rules) == {("y_true", "binary: 0/1 or true/false")}


def test_injection_in_source_name_is_only_a_missing_table(db_url, tmp_path):
    """It treats a hostile source name as a name to look up, never as SQL."""
    config = write_config(
        tmp_path,
        name="evil",
        model="m",
        source="predictions; DROP TABLE audit_runs; --",
        attributes=["race"],
    )
    with pytest.raises(SourceError, match="no such table"):
        audit_flow("evil", config, db_url, END)
    with make_engine(db_url).connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM audit_runs")).scalar() == 1


@pytest.mark.parametrize("mode", ["memory", "pushdown"])
def test_a_threshold_outside_the_scores_range_is_a_warning(db_url, tmp_path, mode, capsys):
    """A decision from a 0-100 score with ``threshold = 0.5`` (a probability's threshold) decides
    every prediction positive: the run says so in a warning line naming the threshold, the
    score and its median, as does a threshold above every score; a threshold inside the
    scores' range says nothing."""
    from biasaudit.flows.pipeline import run_audit

    engine = make_engine(db_url)
    n = 60
    pd.DataFrame(
        {
            "case_no": [f"c{i}" for i in range(n)],
            "decided": pd.Timestamp("2026-10-01"),
            "label": [i % 2 for i in range(n)],
            "risk": [float(5 + i) for i in range(n)],  # 5 to 64, median 34.5
            "region": ["north" if i % 3 else "south" for i in range(n)],
        }
    ).to_sql("decisions", engine, index=False)
    engine.dispose()
    config = tmp_path / "audits.toml"
    audits = ""
    for name, threshold in [("low", 0.5), ("high", 500), ("inside", 30)]:
        audits += (
            f'[[audits]]\nname = "{name}"\nmodel = "m"\nsource = "decisions"\n'
            'attributes = ["region"]\ncolumns = { prediction_id = "case_no", '
            'predicted_at = "decided", y_true = "label" }\n'
            f'decision = {{ score = "risk", threshold = {threshold} }}\n'
            f"scan = {{ mode = {mode!r} }}\n"
        )
    config.write_text(audits)
    expected = {
        "low": "warning: the threshold 0.5 lies at or below every valid score of 'risk', whose "
        "median is 34.5: all 60 predictions are decided positive",
        "high": "warning: the threshold 500 lies above every valid score of 'risk', whose median "
        "is 34.5: all 60 predictions are decided negative",
        "inside": None,
    }
    engine = make_engine(db_url)
    for name, line in expected.items():
        capsys.readouterr()
        run_id = run_audit(name, str(config), db_url, END)["run_id"]
        out = capsys.readouterr().out
        frames = report_frames(engine, run_id)
        stored = frames.run["summary"]["threshold_warning"]
        pages = render_html(frames), render_markdown(frames)
        if line is None:
            assert "warning" not in out, out
            assert stored is None and not any("every valid score" in page for page in pages)
        else:  # printed, stored with the run, and on the report's first lines
            assert line in out, out
            assert stored.startswith(line.removeprefix("warning: "))
            said = line.removeprefix("warning: ")
            assert esc(said) in pages[0] and md(said) in pages[1]
    engine.dispose()
