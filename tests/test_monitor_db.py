"""Monitored runs in the database: stored state, backtest, previous as-of, overlap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import pairwise

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import Column, DateTime, Float, Integer, MetaData, String, Table
from typer.testing import CliRunner

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.scan import valid_cells
from biasaudit.db.store import monitor as db_monitor
from biasaudit.db.store.history import previous_as_of_run, run_results
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.models import ComparisonResult, MonitorResult
from biasaudit.db.store.report_data import report_frames
from biasaudit.flows.audit import run_audit
from biasaudit.flows.cli import app
from biasaudit.flows.config_files import load_config
from biasaudit.flows.monitoring import backfill_plan, backtest, increment
from biasaudit.schemas.config import parse_config
from biasaudit.schemas.results import COMPARISON_KEY, MONITOR_STATE
from biasaudit.tasks.compare import compare_metrics, windows_overlap
from biasaudit.tasks.increments import increment_masks
from biasaudit.tasks.monitor import increment_counts
from biasaudit.tasks.monitor_frame import monitor_frame
from biasaudit.tasks.report import render_html

from .conftest import on_databases

START = datetime(2026, 3, 1, tzinfo=UTC)
NIGHT_KEY = ["as_of", "attribute", "group_name", "reference", "metric"]


def predictions(days: int, per_day: int = 400, seed: int = 4) -> pd.DataFrame:
    """Nightly predictions; group 'c' (10%) is selected more often; 20% of labels missing."""
    rng = np.random.default_rng(seed)
    n = days * per_day
    race = rng.choice(["a", "b", "c"], n, p=[0.6, 0.3, 0.1])
    y_true = rng.binomial(1, 0.4, n).astype(float)
    y_true[rng.random(n) < 0.2] = np.nan
    return pd.DataFrame(
        {
            "prediction_id": [f"p{i}" for i in range(n)],
            "model_id": "m",
            "model_version": "1",
            "predicted_at": START + pd.to_timedelta(rng.uniform(0, days, n), unit="D"),
            "y_true": y_true,
            "y_pred": rng.binomial(1, np.where(race == "c", 0.55, 0.3)),
            "race": race,
            "sex": rng.choice(["F", "M"], n),
        }
    )


def write_config(tmp_path, window="all", tolerance=0.0, alpha=0.05) -> str:
    path = tmp_path / "monitored.toml"
    path.write_text(
        f'[[audits]]\nname = "mon"\nmodel = "m"\nwindow = "{window}"\n'
        'attributes = ["race", "sex"]\nmetrics = ["ppr", "tpr", "fpr"]\n'
        'reference_groups = { race = "a" }\n'
        f"[audits.thresholds]\ntolerance = {tolerance}\nalpha = {alpha}\n"
        "bootstrap_replicates = 100\n"
        '[audits.monitor]\nlabel_delay_days = 2\nmetrics = ["ppr", "tpr", "fpr"]\n'
    )
    return str(path)


def test_monitor_results_store_every_state_column():
    """monitor_results has a column for each name of the state tasks.monitor carries and
    db.store.monitor reads back (schemas.results.MONITOR_STATE)."""
    stored = {c.name for c in MonitorResult.__table__.columns}
    assert set(MONITOR_STATE) <= stored, set(MONITOR_STATE) - stored


# Ten nightly runs and a replay: once, on SQLite. The stored state's round trip and its equality
# with a backtest are checked on every database by test_backfill_replays_later_runs_in_as_of_order.
@pytest.mark.slow
@on_databases("sqlite")
def test_backtest_equals_nightly_monitored_runs(db_url, tmp_path):
    """Nightly monitored runs store per comparison the e-process, CS and alarm (shown in the
    report); a re-run at the same as-of changes nothing; backtest over the same nights gives the
    same numbers, and so does monitor_frame on the generated rows in memory (no database, no
    scan); the CLI's history --monitor and backtest show them."""
    frame = predictions(10)
    load_predictions(make_engine(db_url), frame, ["race", "sex"], "predictions")
    config = write_config(tmp_path)
    nights = [START + timedelta(days=d) for d in range(1, 11)]
    for as_of in nights:
        run_audit("mon", config, db_url, as_of)
    again = run_audit("mon", config, db_url, nights[-1])
    assert not again["new"]
    engine = make_engine(db_url)
    stored = db_monitor.monitor_trajectory(engine, audit="mon")
    assert stored["run_id"].nunique() == len(nights)
    assert stored.loc[stored["group_name"] == "c", "alarm"].any()
    page = render_html(report_frames(engine, int(stored["run_id"].max())))
    assert "Anytime-valid monitoring" in page and '<span class="flag">alarm</span>' in page
    _same_numbers(stored, backtest(db_url, load_config(config).get("mon"), nights[0], nights[-1]))
    in_memory = monitor_frame(
        frame,
        label_delay="2D",
        attributes=["race", "sex"],
        reference_groups={"race": "a"},
        start=nights[0],
        end=nights[-1],
        tolerance=0.0,
    )
    _same_numbers(stored, in_memory)
    cli = CliRunner().invoke(
        app, ["history", "--monitor", "--audit", "mon", "--db", db_url, "--format", "csv"]
    )
    assert cli.exit_code == 0 and "e_process" in cli.output
    cli = CliRunner().invoke(
        app,
        [
            "backtest",
            "mon",
            "--from",
            "2026-03-02",
            "--to",
            "2026-03-11",
            "-c",
            config,
            "--db",
            db_url,
        ],
    )
    assert cli.exit_code == 0, cli.output
    assert "comparisons alarmed" in cli.output


def _same_numbers(stored: pd.DataFrame, replay: pd.DataFrame) -> None:
    stored = stored.assign(as_of=pd.to_datetime(stored["as_of"], utc=True))
    replay = replay.assign(as_of=pd.to_datetime(replay["as_of"], utc=True))
    columns = ["e_value", "e_process", "cs_low", "cs_high", "crossed", "alarm", "denominator_group"]
    a = stored[NIGHT_KEY + columns].sort_values(NIGHT_KEY).reset_index(drop=True)
    b = replay[NIGHT_KEY + columns].sort_values(NIGHT_KEY).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_dtype=False, rtol=1e-9)


@pytest.mark.slow
def test_backfill_replays_later_runs_in_as_of_order(db_url, tmp_path):
    """Nights 1, 2, 4, 5 run, then night 3 is backfilled: the plan re-runs 4 and 5 (forced, new
    versions), and the latest chain equals a backtest of nights 1 to 5."""
    load_predictions(make_engine(db_url), predictions(5, 200), ["race", "sex"], "predictions")
    config = write_config(tmp_path)
    audit = load_config(config).get("mon")
    night = {d: START + timedelta(days=d) for d in range(1, 6)}
    for d in (1, 2, 4, 5):
        run_audit("mon", config, db_url, night[d])
    plan = backfill_plan(db_url, audit, [night[3]])
    assert plan == [(night[3], False), (night[4], True), (night[5], True)]
    for as_of, force in plan:
        run_audit("mon", config, db_url, as_of, force)
    assert backfill_plan(db_url, audit, [night[2]]) == [(night[d], False) for d in (2, 3, 4, 5)]
    stored = db_monitor.monitor_trajectory(make_engine(db_url), audit="mon")
    assert stored["as_of"].nunique() == 5
    _same_numbers(stored, backtest(db_url, audit, night[1], night[5]))


def test_previous_is_the_previous_as_of_and_overlaps_are_not_tested(db_url, tmp_path):
    """A backfilled run compares with the run before its as-of, not the highest version; runs
    whose windows overlap are reported untested, disjoint ones are tested. Comparison and monitor
    rows hold the settings they were tested at: a change's tolerance 0, the monitor's and both
    alphas from the configuration."""
    load_predictions(make_engine(db_url), predictions(12, 150), ["race", "sex"], "predictions")
    config = write_config(tmp_path, window="last_day", tolerance=0.02, alpha=0.1)
    late = run_audit("mon", config, db_url, START + timedelta(days=10))["run_id"]
    early = run_audit("mon", config, db_url, START + timedelta(days=5))["run_id"]
    backfilled = run_audit("mon", config, db_url, START + timedelta(days=7))["run_id"]
    engine = make_engine(db_url)
    assert previous_as_of_run(engine, "mon", "m", START + timedelta(days=7)).id == early
    comparison = run_results(engine, ComparisonResult, backfilled)
    assert set(comparison["previous_run_id"]) == {early}
    assert not comparison["overlapping"].any() and comparison["p_value"].notna().any()
    assert set(comparison["tolerance"]) == {0.0} and set(comparison["alpha"]) == {0.1}
    monitored = run_results(engine, MonitorResult, backfilled)
    assert len(monitored) > 0
    assert set(monitored["tolerance"]) == {0.02} and set(monitored["alpha"]) == {0.1}
    assert late != backfilled
    overlapping = write_config(tmp_path, window="last_3_days")
    run_audit("mon", overlapping, db_url, START + timedelta(days=11))
    last = run_audit("mon", overlapping, db_url, START + timedelta(days=12))["run_id"]
    comparison = run_results(engine, ComparisonResult, last)
    assert comparison["overlapping"].all() and comparison["p_value"].isna().all()
    cli = CliRunner().invoke(app, ["compare", str(last), "--db", db_url])
    assert cli.exit_code == 0, cli.output
    assert "overlap (they share predictions): no change is tested" in cli.output
    assert "--as-of are at least 3 days apart" in cli.output  # the window's length
    cli = CliRunner().invoke(app, ["compare", str(backfilled), "--db", db_url, "--format", "csv"])
    assert cli.exit_code == 0, cli.output


@pytest.mark.parametrize(
    "before, after, overlap",
    [
        ((None, START), (START, START + timedelta(1)), False),
        ((START - timedelta(30), START), (START - timedelta(29), START + timedelta(1)), True),
        ((None, START), (None, START + timedelta(1)), True),
        ((START, START + timedelta(1)), (START - timedelta(5), START), False),
    ],
)
def test_windows_overlap(before, after, overlap):
    """(start, end] windows overlap when each starts before the other ends."""
    assert windows_overlap(before, after) is overlap


def test_overlapping_runs_are_not_tested():
    """compare_metrics with overlapping data reports changes and tests none."""
    before = pd.DataFrame(
        {
            "attribute": ["r"],
            "group_name": ["g"],
            "metric": ["tpr"],
            "value": [0.5],
            "numerator": [50.0],
            "denominator": [100.0],
        }
    )
    after = before.assign(value=0.9, numerator=90.0)
    tested = compare_metrics(before, after, 0.05)
    untested = compare_metrics(before, after, 0.05, overlapping=True)
    assert tested["significant"].all() and not untested["significant"].any()
    assert untested["p_value"].isna().all() and untested["change"].iloc[0] == pytest.approx(0.4)


# A monitored audit's increments come from the audit's own scan: its source database, decision
# from a score, scan mode, validation and quarantine (flows.monitoring, db.sources.scan.valid_cells).

NUMBERS = ["e_value", "e_process", "cs_low", "cs_high", "crossed", "alarm", "difference"]
COUNTED = ["denominator_group", "denominator_reference"]


def two_audits(tmp_path, first: str, second: str) -> str:
    """A configuration of two monitored audits ``mon`` and ``other`` of model m, the same as
    write_config's apart from the extra TOML lines ``first`` and ``second``."""
    audit = (
        '[[audits]]\nname = "{name}"\nmodel = "m"\nwindow = "all"\n{extra}\n'
        'attributes = ["race", "sex"]\nmetrics = ["ppr", "tpr", "fpr"]\n'
        'reference_groups = {{ race = "a" }}\n'
        "[audits.thresholds]\ntolerance = 0.0\nbootstrap_replicates = 100\n"
        '[audits.monitor]\nlabel_delay_days = 1\nmetrics = ["ppr", "tpr", "fpr"]\n'
    )
    path = tmp_path / "two.toml"
    path.write_text(
        audit.format(name="mon", extra=first) + audit.format(name="other", extra=second)
    )
    return str(path)


def monitored_rows(db_url: str, audit: str) -> pd.DataFrame:
    stored = db_monitor.monitor_trajectory(make_engine(db_url), audit=audit)
    columns = NIGHT_KEY + NUMBERS + COUNTED
    return stored[columns].sort_values(NIGHT_KEY).reset_index(drop=True)


def source_table(engine, frame: pd.DataFrame, name: str = "preds") -> None:
    """``frame``'s predictions as a plain table of their own (naive UTC timestamps)."""
    table = Table(
        name,
        MetaData(),
        Column("prediction_id", String(20)),
        Column("model_id", String(10)),
        Column("predicted_at", DateTime()),
        Column("y_true", Float()),
        Column("y_pred", Integer()),
        Column("race", String(10)),
        Column("sex", String(10)),
    )
    table.drop(engine, checkfirst=True)
    table.create(engine)
    times = pd.to_datetime(frame["predicted_at"], utc=True).dt.tz_localize(None).dt.floor("us")
    rows = frame[[c.name for c in table.columns]].astype(object)
    records = rows.where(rows.notna(), None).to_dict("records")
    for record, moment in zip(records, times):
        record["predicted_at"] = None if pd.isna(moment) else moment.to_pydatetime()
    with engine.begin() as connection:
        connection.execute(table.insert(), records)


@pytest.mark.slow
@on_databases("sqlite")
@pytest.mark.parametrize("source_db_url", ["sqlite", "postgresql"], indirect=True)
def test_monitor_reads_the_audits_source_database(db_url, source_db_url, tmp_path):
    """A monitored audit whose predictions live in another database (``source_db``) writes the
    same monitor rows, and backtests the same nights, as the same predictions in the store's own
    ``predictions`` table (it wrote none: the monitor read the store)."""
    frame = predictions(3, 200)
    load_predictions(make_engine(db_url), frame, ["race", "sex"], "predictions")
    source_table(make_engine(source_db_url), frame)
    config = two_audits(tmp_path, "", f'source = "preds"\nsource_db = "{source_db_url}"')
    nights = [START + timedelta(days=d) for d in range(1, 4)]
    for as_of in nights:
        run_audit("mon", config, db_url, as_of)
        run_audit("other", config, db_url, as_of)
    expected = monitored_rows(db_url, "mon")
    assert len(expected) > 0
    pd.testing.assert_frame_equal(monitored_rows(db_url, "other"), expected)
    stored = db_monitor.monitor_trajectory(make_engine(db_url), audit="other")
    _same_numbers(stored, backtest(db_url, load_config(config).get("other"), *nights[::2]))


@pytest.mark.slow
@on_databases("sqlite")
def test_monitor_takes_the_decision_from_the_score(db_url, tmp_path):
    """A monitored audit whose decision is ``score >= 0.5`` runs (it failed on the schema) and
    writes the monitor rows of the same predictions with y_pred = score >= 0.5 precomputed."""
    rng = np.random.default_rng(7)
    frame = predictions(3, 200)
    score = rng.integers(0, 65, len(frame)) / 64  # exact in the table's single precision
    frame = frame.assign(score=score, y_pred=(score >= 0.5).astype(int))
    load_predictions(make_engine(db_url), frame, ["race", "sex"], "predictions")
    config = two_audits(tmp_path, "", 'decision = { score = "score", threshold = 0.5 }')
    for as_of in [START + timedelta(days=d) for d in range(1, 4)]:
        run_audit("mon", config, db_url, as_of)
        run_audit("other", config, db_url, as_of)
    expected = monitored_rows(db_url, "mon")
    assert len(expected) > 0
    pd.testing.assert_frame_equal(monitored_rows(db_url, "other"), expected)


def monitored_source(mode: str):
    """A monitored audit of the table ``preds`` (label delay one day) scanned in ``mode``."""
    audit = {
        "name": "mon",
        "model": "m",
        "source": "preds",
        "attributes": ["race", "sex"],
        "reference_groups": {"race": "a"},
        "scan": {"mode": mode, "chunk_rows": 1000},
        "monitor": {"label_delay_days": 1},
    }
    return parse_config({"audits": [audit]}).audits[0]


def test_increment_counts_agree_in_every_scan_mode(source_db_url):
    """The monitor's increment counts are the same in memory, stream and push-down modes, and
    equal the counts of the valid generated rows cut by tasks.increments.increment_masks; rows
    the schema rejects (a decision 2, an empty group, no timestamp, an empty id) never count and
    a repeated row counts once."""
    engine = make_engine(source_db_url)
    valid = predictions(3, 150, seed=9)
    valid["predicted_at"] = valid["predicted_at"].dt.floor("us")  # as the databases keep them
    bad = valid.iloc[:4].assign(prediction_id=["x1", "x2", "x3", ""], y_pred=[2, 1, 1, 1])
    bad["race"] = ["a", "", "b", "c"]
    bad["predicted_at"] = [START + timedelta(hours=h) for h in (30, 40, 45, 50)]
    bad.loc[bad.index[2], "predicted_at"] = None
    source_table(engine, pd.concat([valid, bad, valid.iloc[[5]]], ignore_index=True))
    now = START + timedelta(days=10)
    audits = {mode: monitored_source(mode) for mode in ["memory", "stream", "pushdown"]}
    nights = [None, *(START + timedelta(days=d) for d in range(1, 4))]
    for previous, as_of in pairwise(nights):
        masks = increment_masks(
            valid["predicted_at"], valid["y_true"].notna(), previous, as_of, "1D"
        )
        matured = masks.outcomes | masks.unlabelled
        outcomes = valid[matured].assign(y_true=valid["y_true"].where(masks.outcomes)[matured])
        expected = increment_counts(
            valid[masks.decisions],
            outcomes,
            attributes=["race", "sex"],
            reference_groups={"race": "a"},
        )
        assert expected["denominator_group"].sum() > 0
        for mode, audit in audits.items():
            counted = increment(partial(valid_cells, engine, audit, now=now), audit, previous, as_of)
            pd.testing.assert_frame_equal(
                counted.sort_values(COMPARISON_KEY).reset_index(drop=True),
                expected.sort_values(COMPARISON_KEY).reset_index(drop=True),
                check_dtype=False,
                obj=f"{mode} increment after {previous}",
            )
