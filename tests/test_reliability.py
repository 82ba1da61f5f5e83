"""Reliability and security: nothing lost, no partial runs, no injection (SQLite and PostgreSQL)."""

import functools
import json
import multiprocessing
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, insert, inspect, select, text, update
from sqlalchemy.exc import OperationalError

import biasaudit.flows.pipeline
import biasaudit.tasks.core
from biasaudit.db.engine import make_engine
from biasaudit.db.retry import StepFailed
from biasaudit.db.sources.catalogue import SourceError
from biasaudit.db.sources.read import EmptyWindow
from biasaudit.db.store.history import list_runs
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.models import AuditRun, GroupCount, MetricResult, Prediction, QuarantinedRow
from biasaudit.db.store.runs import ABANDONED, abandon_stale_runs, release_run, start_run
from biasaudit.flows.audit import audit_flow, run_audit
from biasaudit.flows.demo import END, GROUPS, synthetic_predictions
from biasaudit.schemas.quarantine import TooManyInvalidRows, split_valid

from .conftest import DEMO_CONFIG, on_databases, separate_database

RESULT_TABLES = (GroupCount, MetricResult)


@functools.cache
def _demo_data() -> pd.DataFrame:
    """The demo's predictions, generated once per session (about a second each time otherwise)."""
    return synthetic_predictions()


def load_small(url, models=("credit-scorer",), rows=3000):
    data = _demo_data()
    data = data[data["model_id"].isin(models)].groupby("model_id").head(rows)
    load_predictions(make_engine(url), data, list(GROUPS), "test")
    return data


def counts(url, *tables):
    with make_engine(url).connect() as connection:
        return [connection.scalar(select(func.count()).select_from(t)) for t in tables]


# ---- bad input ---------------------------------------------------------------------------------

HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.sampled_from(["", " ", "0", "1", "2026-01-01", "2999-01-01", "NaN"]),
)


@st.composite
def hostile_frames(draw):
    n = draw(st.integers(0, 25))
    column = lambda: draw(st.lists(HOSTILE, min_size=n, max_size=n))
    return pd.DataFrame(
        {
            "prediction_id": draw(
                st.lists(st.sampled_from(["a", "b", "c", None, "", 7]), min_size=n, max_size=n)
            ),
            "model_id": "m",
            "model_version": "1",
            "predicted_at": column(),
            "y_true": column(),
            "y_pred": column(),
            "score": column(),
            "race": column(),
        },
        dtype=object,
    )


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_frames())
def test_accepted_plus_quarantined_is_read(frame):
    """It never loses or duplicates a row of a hostile frame: accepted + quarantined = read, every
    quarantined row has its reason, and every accepted row is clean."""
    valid, quarantine = split_valid(frame, ["race"])
    quarantined = set(quarantine["row_number"])
    assert len(valid) + len(quarantined) == len(frame)
    assert quarantined.isdisjoint(valid.index) and quarantine["rule"].notna().all()
    assert set(valid["y_pred"]) <= {0, 1}
    assert valid["y_true"].dropna().isin([0.0, 1.0]).all()
    assert valid["race"].str.strip().str.len().gt(0).all()
    assert valid["prediction_id"].is_unique


def test_future_timestamps_are_quarantined():
    """It quarantines predictions time-stamped in the future, with the rule."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    frame = pd.DataFrame(
        {
            "prediction_id": ["a", "b"],
            "model_id": "m",
            "model_version": "1",
            "predicted_at": [now - timedelta(days=1), now + timedelta(hours=1)],
            "y_true": [1, 0],
            "y_pred": [1, 0],
            "score": [0.5, 0.5],
            "race": ["x", "y"],
        }
    )
    valid, quarantine = split_valid(frame, ["race"], now)
    assert list(valid["prediction_id"]) == ["a"]
    assert quarantine[["row_ref", "column_name", "rule"]].values.tolist() == [
        ["b", "predicted_at", "not_in_future"]
    ]


def toml_value(value):
    """JSON strings and arrays are TOML too; inline tables need key = value pairs."""
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items()) + " }"
        )
    return json.dumps(value)


def write_config(tmp_path, **changes):
    audit = {"name": "a", "model": "credit-scorer", "attributes": ["race", "sex"], **changes}
    lines = ["[[audits]]", *(f"{key} = {toml_value(value)}" for key, value in audit.items())]
    path = tmp_path / "audits.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_unknown_model_and_empty_window_are_clear(db_url, tmp_path):
    """It names an unknown model (and the known ones), and an empty window, as run errors."""
    load_small(db_url)
    with pytest.raises(EmptyWindow, match=r"unknown model 'ghost'.*credit-scorer"):
        run_audit("a", write_config(tmp_path, model="ghost"), db_url, END)
    with pytest.raises(EmptyWindow, match="no predictions of model 'credit-scorer'"):
        run_audit("a", write_config(tmp_path, window="last_day"), db_url, END + timedelta(days=30))
    runs = list_runs(make_engine(db_url))
    assert list(runs["status"]) == ["failed", "failed"]
    assert counts(db_url, *RESULT_TABLES) == [0, 0]


def test_every_row_invalid_is_one_clear_run_error(db_url, tmp_path):
    """Every row of the window invalid, with max_invalid_fraction = 1.0 allowing it: the run fails
    with one line saying there is nothing to audit, keeps the quarantine and stores no results;
    audit_frame returns an empty audit with the quarantine (both once raised AttributeError)."""
    import biasaudit
    from biasaudit.schemas.quarantine import TooManyInvalidRows

    rows = pd.DataFrame(
        {
            "prediction_id": ["a", "b", "c"],
            "model_id": "m",
            "predicted_at": ["2026-01-01", "2026-01-02", "2026-01-03"],
            "y_true": [1, 0, 1],
            "y_pred": [5, 6, 7],
            "race": ["x", "y", "z"],
        }
    )
    rows.to_sql("all_bad", make_engine(db_url), index=False)
    config = write_config(
        tmp_path,
        model="m",
        source="all_bad",
        attributes=["race"],
        thresholds={"max_invalid_fraction": 1.0},
    )
    with pytest.raises(TooManyInvalidRows, match="all 3 rows failed validation: nothing to audit"):
        run_audit("a", config, db_url, END)
    assert list_runs(make_engine(db_url))["status"].tolist() == ["failed"]
    assert counts(db_url, *RESULT_TABLES) == [0, 0]
    with pytest.warns(UserWarning, match="3 of 3 rows failed validation"):
        result = biasaudit.audit_frame(
            rows[["y_true", "y_pred", "race"]], attributes=["race"], max_invalid_fraction=1.0
        )
    assert result.counts.empty and result.detection.empty and len(result.quarantine) == 3


# ---- models without labels ---------------------------------------------------------------------

# MCC of a group with no labelled prediction: all four margins are zero (136 characters, over 128).
NO_LABELS_MCC = (
    "tp+fn = 0 (no actual positives); fp+tn = 0 (no actual negatives); "
    "tp+fp = 0 (no predicted positives); fn+tn = 0 (no predicted negatives)"
)


@pytest.mark.parametrize("labelled", ["nobody", "White only"])
def test_a_model_without_labels_is_audited_and_stored(db_url, labelled):
    """A new model has no outcomes yet (or only for some groups): its run succeeds on every store
    and keeps each undefined metric's whole reason, however long."""
    data = _demo_data()
    data = data[data["model_id"] == "credit-scorer"].head(3000)
    keep = (data["race"] == "White") & (labelled == "White only")
    data = data.assign(y_true=data["y_true"].where(keep))
    load_predictions(make_engine(db_url), data, list(GROUPS), "test")
    result = run_audit("credit-race", str(DEMO_CONFIG), db_url, END)
    with make_engine(db_url).connect() as connection:
        status, unlabelled = connection.execute(
            select(AuditRun.status, AuditRun.rows_unlabelled)
        ).one()
        stored = pd.DataFrame(
            connection.execute(
                select(
                    MetricResult.group_name,
                    MetricResult.metric,
                    MetricResult.value,
                    MetricResult.undefined_reason,
                ).where(
                    MetricResult.run_id == result["run_id"],
                    MetricResult.attribute == "race",
                    MetricResult.subset == "group",
                    MetricResult.estimator == "raw",
                )
            ).all()
        ).set_index(["group_name", "metric"])
    assert result["new"] and status == "succeeded"
    assert unlabelled == data["y_true"].isna().sum()
    for group in set(data["race"]) - set(data.loc[keep, "race"]):
        assert stored.loc[(group, "mcc"), "undefined_reason"] == NO_LABELS_MCC
        assert pd.isna(stored.loc[(group, "mcc"), "value"])
    by_race = data.groupby("race")
    # the selection rate counts every prediction, labelled or not
    assert stored.xs("ppr", level="metric")["value"].to_dict() == pytest.approx(
        by_race["y_pred"].mean().to_dict()
    )
    if labelled == "White only":
        white = data[keep]
        positives = white[white["y_true"] == 1]
        assert stored.loc[("White", "tpr"), "value"] == pytest.approx(positives["y_pred"].mean())


def test_an_older_store_takes_reasons_of_any_length_after_upgrade(db_url):
    """A store of revision 0010 (reasons of at most 128 characters) upgraded by `db upgrade`
    stores a longer reason, in the table and in the metric_series view analysts read."""
    from alembic import command

    from biasaudit.db.store.migrate import alembic_config, upgrade
    from biasaudit.flows.config_files import load_audit
    from biasaudit.flows.pipeline import new_record

    engine = make_engine(db_url)

    def reason_lengths():
        inspector = inspect(engine)
        return [
            getattr(column["type"], "length", None)
            for table in ("metric_results", "two_group_results")
            for column in inspector.get_columns(table)
            if column["name"] == "undefined_reason"
        ]

    command.downgrade(alembic_config(db_url), "0010")
    assert reason_lengths() == [128, 128]
    upgrade(db_url)
    assert reason_lengths() == [None, None]
    run_id = start_run(engine, new_record(load_audit(DEMO_CONFIG, "credit-race"), END))
    release_run(run_id)  # its row stays, made a succeeded run below
    with engine.begin() as connection:
        connection.execute(
            insert(MetricResult).values(
                run_id=run_id,
                attribute="race",
                group_name="Black",
                subset="group",
                metric="mcc",
                estimator="raw",
                undefined_reason=NO_LABELS_MCC,
            )
        )
        connection.execute(
            update(AuditRun).where(AuditRun.id == run_id).values(status="succeeded", version=1)
        )
    with engine.connect() as connection:
        shown = connection.execute(text("SELECT undefined_reason FROM metric_series")).scalars()
        assert shown.all() == [NO_LABELS_MCC]
    engine.dispose()


# ---- atomic runs -------------------------------------------------------------------------------

# The pipeline's steps (through its ``run`` hook) and the core's stages, by the function each
# calls (tasks.core), under the names of the run's stored timings.
STEPS = ["scan", "counts"]
CORE_STAGES = {
    "pairs": "comparison_pairs",
    "comparison rates": "comparison_rates",
    "metrics": "group_metrics",
    "two-group metrics": "two_group_metrics",
    "compare": "compare_with_previous",
    "match": "match_test",
    "planning": "plan",
    "detection": "detect",
    "smoothing": "smoothed_metrics",
    "meta-metrics": "attribute_meta_metrics",
}
STAGES = [*STEPS, *CORE_STAGES]


# Where a stage fails is the flow's business, not the database's: every stage on SQLite, and the
# last stage before the results transaction on each database (its failed run recorded there).
@pytest.mark.parametrize(
    ("db_url", "stage"),
    [("sqlite", stage) for stage in STAGES] + [("postgresql", STAGES[-1]), ("mariadb", STAGES[-1])],
    indirect=["db_url"],
)
def test_failure_at_any_stage_leaves_no_results(db_url, tmp_path, monkeypatch, stage):
    """It records the run failed with the error and shows none of its results."""
    load_small(db_url)

    def boom(*_args, **_options):
        raise RuntimeError(f"injected failure in {stage}")

    if stage in CORE_STAGES:
        monkeypatch.setattr(biasaudit.tasks.core, CORE_STAGES[stage], boom)
    else:

        def failing_step(name, function, *args, **options):
            return boom() if name == stage else function(*args, **options)

        monkeypatch.setattr(biasaudit.flows.pipeline, "call", failing_step)
    with pytest.raises(RuntimeError, match="injected"):
        run_audit("credit-race", str(DEMO_CONFIG), db_url, END)
    run = list_runs(make_engine(db_url)).iloc[0]
    assert run["status"] == "failed" and f"injected failure in {stage}" in run["error"]
    assert counts(db_url, *RESULT_TABLES) == [0, 0]


def test_failure_inside_the_results_transaction_rolls_back(db_url, monkeypatch):
    """It rolls back every result row when writing fails half-way through the transaction."""
    load_small(db_url)
    import biasaudit.db.store.runs

    calls = {"n": 0}
    original = biasaudit.db.store.runs._columns  # each result table's values, INSERT or COPY

    def failing(frame, run_id):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full (injected)")
        return original(frame, run_id)

    monkeypatch.setattr(biasaudit.db.store.runs, "_columns", failing)
    with pytest.raises(OSError, match="disk full"):
        run_audit("credit-race", str(DEMO_CONFIG), db_url, END)
    assert counts(db_url, *RESULT_TABLES) == [0, 0]
    assert list_runs(make_engine(db_url))["status"].tolist() == ["failed"]


KILL_SCRIPT = textwrap.dedent(
    """
    import sys, time, pathlib
    import biasaudit.db.store.runs
    from biasaudit.flows.audit import run_audit
    from biasaudit.flows.demo import END

    url, config, marker = sys.argv[1:4]
    original = biasaudit.db.store.runs._insert_results
    written = {"n": 0}
    def insert_then_pause(connection, table, frame, run_id):  # INSERTs, or COPY on PostgreSQL
        original(connection, table, frame, run_id)
        written["n"] += 1
        if written["n"] == 1:
            pathlib.Path(marker).write_text("between two result tables")
            time.sleep(120)
    biasaudit.db.store.runs._insert_results = insert_then_pause
    run_audit("credit-race", config, url, END)
    """
)


@pytest.mark.slow
def test_killed_mid_write_leaves_nothing_and_is_marked_abandoned(db_url, tmp_path):
    """It shows no part of a run whose process is killed between two inserts, and the next
    start of the audit marks that run failed."""
    load_small(db_url)
    marker = tmp_path / "marker"
    child = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, db_url, str(DEMO_CONFIG), str(marker)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 120
    while not marker.exists():
        assert child.poll() is None, child.stderr.read().decode()[-2000:]
        assert time.time() < deadline
        time.sleep(0.1)
    child.send_signal(signal.SIGKILL)
    child.wait()
    engine = make_engine(db_url)
    assert counts(db_url, *RESULT_TABLES, QuarantinedRow) == [0, 0, 0]
    assert list_runs(engine)["status"].tolist() == ["running"]
    assert abandon_stale_runs(engine, "credit-race", timedelta(0)) == 1
    run = list_runs(engine).iloc[0]
    assert (run["status"], run["error"]) == ("failed", ABANDONED)
    result = run_audit("credit-race", str(DEMO_CONFIG), db_url, END)  # a later run succeeds
    assert result["new"] and list_runs(engine, status="succeeded")["version"].tolist() == [1]


# The default lease's length (None: 30 s, waited for) is proven once, on SQLite; the heartbeat
# (SQLite, MariaDB) and the advisory lock (PostgreSQL) each with a 6 s lease on their database.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("db_url", "lease"),
    [("sqlite", None), ("sqlite", "6"), ("postgresql", "6"), ("mariadb", "6")],
    indirect=["db_url"],
)
def test_killed_run_never_blocks_the_next_one(db_url, tmp_path, monkeypatch, lease):
    """After kill -9 of a running audit, the next run of it starts and completes within a minute
    with no manual step (PostgreSQL: the dead session's lock is free at once; SQLite: the heartbeat
    lapses), and the dead run shows as failed, abandoned. ``lease`` None: the default 30 s."""
    if lease is not None:
        monkeypatch.setenv("BIASAUDIT_LEASE_SECONDS", lease)
    load_small(db_url)
    marker = tmp_path / "marker"
    child = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, db_url, str(DEMO_CONFIG), str(marker)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 120
    while not marker.exists():
        assert child.poll() is None, child.stderr.read().decode()[-2000:]
        assert time.time() < deadline
        time.sleep(0.1)
    child.send_signal(signal.SIGKILL)
    child.wait()
    engine = make_engine(db_url)
    assert list_runs(engine)["status"].tolist() == ["running"]
    started = time.monotonic()
    result = run_audit("credit-race", str(DEMO_CONFIG), db_url, END)
    elapsed = time.monotonic() - started
    assert result["new"] and elapsed < 60
    runs = list_runs(engine).set_index("id")
    dead = runs.drop(index=result["run_id"]).iloc[0]
    assert dead["status"] == "failed" and dead["error"].startswith(ABANDONED)
    assert runs.loc[result["run_id"], "status"] == "succeeded"
    if db_url.startswith("sqlite"):  # it waited for the lease to lapse, no longer
        assert elapsed > float(lease or 30) * 0.5


def test_live_run_is_waited_for_not_abandoned(db_url, monkeypatch):
    """It waits for a run whose process is alive (fresh heartbeat or held lock) and never marks it
    failed; once that run ends, the next one starts."""
    import threading

    from biasaudit.db.store.runs import RunInProgress, release_run, start_run
    from biasaudit.flows.config_files import load_config
    from biasaudit.flows.pipeline import new_record

    monkeypatch.setenv("BIASAUDIT_LEASE_SECONDS", "3")
    audit = load_config(DEMO_CONFIG).get("credit-race")
    engine = make_engine(db_url)
    first = start_run(engine, new_record(audit, END))
    with pytest.raises(RunInProgress):
        start_run(engine, new_record(audit, END), wait=timedelta(seconds=5), poll=0.5)
    assert list_runs(engine)["status"].tolist() == ["running"]  # alive: heartbeats kept it
    timer = threading.Timer(1.0, release_run, args=(first,))
    timer.start()
    with engine.begin() as connection:  # the first run finishes, then releases its lease
        connection.execute(
            AuditRun.__table__.update().where(AuditRun.id == first).values(status="failed")
        )
    second = start_run(engine, new_record(audit, END), wait=timedelta(seconds=30), poll=0.2)
    timer.join()
    release_run(second)
    assert list_runs(engine).set_index("id").loc[second, "status"] == "running"


# ---- concurrency -------------------------------------------------------------------------------


def fresh_postgres(url):
    """An empty, migrated PostgreSQL schema holding a small demo load."""
    from biasaudit.db.store.migrate import upgrade

    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    upgrade(url)
    load_small(url)
    return engine


def _audit_in_process(url, force):
    return run_audit("credit-race", str(DEMO_CONFIG), url, END, force)["run_id"]


# Forced, four processes each run the whole audit on two cores (53 s on two shared cores): slow;
# unforced, three of them wait for the first and reuse its run.
@pytest.mark.parametrize("force", [pytest.param(True, marks=pytest.mark.slow), False])
def test_parallel_runs_get_distinct_gap_free_versions(postgres_server_url, force):
    """It gives four simultaneous runs versions 1..4 (forced) or one shared run (unchanged input)."""
    url = postgres_server_url
    engine = fresh_postgres(url)
    context = multiprocessing.get_context("fork")
    with context.Pool(4) as pool:
        run_ids = pool.starmap(_audit_in_process, [(url, force)] * 4)
    runs = list_runs(engine, status="succeeded")
    (group_rows,) = counts(url, GroupCount)
    if force:
        assert sorted(runs["version"]) == [1, 2, 3, 4] and len(set(run_ids)) == 4
    else:
        assert runs["version"].tolist() == [1] and len(set(run_ids)) == 1
    per_run = group_rows / len(runs)
    assert per_run == int(per_run) and group_rows == len(runs) * per_run  # no lost or extra rows
    assert list_runs(engine, status="running").empty


# ---- faults ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("prefect_harness")
@on_databases("sqlite")  # the unreachable database is a fixed PostgreSQL URL whatever db_url is
def test_database_unreachable_then_a_later_run_succeeds(db_url):
    """It retries, then fails with the step, the database, the cause and what to do when the
    database is down; a later run succeeds."""
    load_small(db_url)
    down = "postgresql://postgres@127.0.0.1:1/none"
    with pytest.raises(
        StepFailed,
        match=r"^recording the run's start on postgresql://postgres@127\.0\.0\.1:1/none "
        r"failed \(.*127\.0\.0\.1.*\); check that the database is up and reachable",
    ):
        audit_flow("credit-race", str(DEMO_CONFIG), down, END)
    assert audit_flow("credit-race", str(DEMO_CONFIG), db_url, END)["new"]


@pytest.mark.usefixtures("prefect_harness")
def test_connection_dropped_during_persist_is_retried(db_url, monkeypatch):
    """It retries the persist task with backoff when the connection drops, and the run lands once."""
    load_small(db_url)
    original = biasaudit.flows.pipeline.save_run
    attempts = {"n": 0}

    def flaky(*args, **kwargs):
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise OperationalError(
                "INSERT ...", {}, ConnectionResetError("server closed the connection")
            )
        return original(*args, **kwargs)

    monkeypatch.setattr(biasaudit.flows.pipeline, "save_run", flaky)
    result = audit_flow("credit-race", str(DEMO_CONFIG), db_url, END)
    assert attempts["n"] == 2 and result["new"]
    assert list_runs(make_engine(db_url))["status"].tolist() == ["succeeded"]


@on_databases("postgresql")
def test_connection_dropped_during_copy_is_retried_like_any_drop(db_url, monkeypatch):
    """A PostgreSQL session terminated in the middle of persist's COPY raises SQLAlchemy's
    OperationalError (the error db.retry retries), not the driver's own, and nothing is stored."""
    import psycopg

    from biasaudit.db.retry import is_transient
    from biasaudit.db.store.runs import _insert_results, release_run, start_run
    from biasaudit.flows.config_files import load_audit
    from biasaudit.flows.pipeline import new_record

    engine = make_engine(db_url)
    record = new_record(load_audit(DEMO_CONFIG, "credit-race"), END)
    run_id = start_run(engine, record)
    counts_frame = pd.DataFrame(
        {"attribute": "race", "group_name": [f"g{i}" for i in range(2000)], "subset": "all"}
        | dict.fromkeys(["tp", "fp", "fn", "tn", "n_unlabelled"], 1)
    )
    original, admin = psycopg.Copy.write_row, make_engine(db_url)

    def write_after_termination(self, row):
        if not getattr(self, "_terminated", False):
            self._terminated = True
            with admin.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": backend})
        return original(self, row)

    monkeypatch.setattr(psycopg.Copy, "write_row", write_after_termination)
    try:
        with pytest.raises(OperationalError) as raised, engine.begin() as connection:
            backend = connection.execute(text("SELECT pg_backend_pid()")).scalar()
            _insert_results(connection, GroupCount.__table__, counts_frame, run_id)
        assert is_transient(raised.value)
    finally:
        release_run(run_id)
    assert counts(db_url, GroupCount) == [0]


@on_databases("postgresql")
def test_a_value_copy_refuses_is_sqlalchemys_error(db_url):
    """A result value PostgreSQL refuses during persist's COPY (a group name over the column's
    512 characters) raises SQLAlchemy's DataError, as an INSERT would: a handled error with a
    one-line message (flows.logs), not the driver's own exception."""
    from sqlalchemy.exc import DataError

    from biasaudit.db.store.runs import _insert_results, release_run, start_run
    from biasaudit.flows.config_files import load_audit
    from biasaudit.flows.logs import handled_errors
    from biasaudit.flows.pipeline import new_record

    engine = make_engine(db_url)
    run_id = start_run(engine, new_record(load_audit(DEMO_CONFIG, "credit-race"), END))
    frame = pd.DataFrame(
        {"attribute": "race", "group_name": ["x" * 600], "subset": "all"}
        | dict.fromkeys(["tp", "fp", "fn", "tn", "n_unlabelled"], 1)
    )
    try:
        with pytest.raises(DataError) as raised, engine.begin() as connection:
            _insert_results(connection, GroupCount.__table__, frame, run_id)
        assert isinstance(raised.value, handled_errors())
    finally:
        release_run(run_id)


# ---- security ----------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgresql", "mariadb"])
def loaded_db_url(request, tmp_path_factory):
    """A migrated database per engine holding the small demo load, shared by the injection tests:
    each adds one failed run and must change nothing else (checked against the state before it)."""
    with separate_database(request.param, tmp_path_factory.mktemp("injection")) as url:
        load_small(url)
        yield url


INJECTIONS = [
    "predictions; DROP TABLE audit_runs; --",
    'x" OR 1=1 --',
    "race') OR ('1'='1",
    "'; DELETE FROM predictions; --",
]


@pytest.mark.parametrize("payload", INJECTIONS)
@pytest.mark.parametrize(
    "where",
    [
        "source",
        "y_true column",
        "prediction_id column",
        "model_id column",
        "attribute",
        "model",
        "model_version",
        "reference group",
    ],
)
def test_injection_in_every_configurable_identifier_is_inert(
    loaded_db_url, tmp_path, where, payload
):
    """It looks names up in the catalogue and binds values: a hostile string fails cleanly and
    changes nothing."""
    db_url = loaded_db_url
    before = counts(db_url, Prediction, *RESULT_TABLES)
    runs_before = set(list_runs(make_engine(db_url))["id"])
    changes = {
        "source": {"source": payload},
        "y_true column": {"columns": {"y_true": payload}},
        "prediction_id column": {"columns": {"prediction_id": payload}},
        "model_id column": {"columns": {"model_id": payload}},
        "attribute": {"attributes": [payload]},
        "model": {"model": payload},
        "model_version": {"model_version": payload},
        "reference group": {"reference_groups": {"race": payload}},
    }[where]
    with pytest.raises((SourceError, EmptyWindow, TooManyInvalidRows, LookupError)):
        run_audit("a", write_config(tmp_path, **changes), db_url, END)
    assert counts(db_url, Prediction, *RESULT_TABLES) == before
    runs = list_runs(make_engine(db_url))
    assert set(runs["id"]) > runs_before  # nothing dropped or deleted; the new run only:
    assert runs[~runs["id"].isin(runs_before)]["status"].tolist() == ["failed"]


def test_runs_of_the_same_audit_do_not_overlap(postgres_server_url):
    """It makes a second simultaneous run wait until the first has finished."""
    url = postgres_server_url
    engine = fresh_postgres(url)
    context = multiprocessing.get_context("fork")
    with context.Pool(2) as pool:
        pool.starmap(_audit_in_process, [(url, True)] * 2)
    with engine.connect() as connection:
        spans = connection.execute(
            select(AuditRun.started_at, AuditRun.finished_at).order_by(AuditRun.started_at)
        ).all()
    assert len(spans) == 2 and spans[0].finished_at <= spans[1].started_at


def test_operator_can_release_an_abandoned_run(db_url):
    """It lets an operator mark a run left 'running' as failed, and only such a run."""
    from typer.testing import CliRunner

    from biasaudit.flows.cli import app

    load_small(db_url)
    engine = make_engine(db_url)
    with engine.begin() as connection:
        connection.execute(
            AuditRun.__table__.insert().values(
                audit_name="credit-race",
                model_id="credit-scorer",
                status="running",
                as_of=END,
                window_end=END,
                config={},
                config_hash="x",
                code_version="0",
                started_at=datetime.now(UTC),
                finished_at=datetime.now(UTC),
                timings={},
                summary={},
                rows_read=0,
                rows_valid=0,
                rows_quarantined=0,
                rows_unlabelled=0,
            )
        )
    run_id = int(list_runs(engine)["id"].iloc[0])
    runner = CliRunner()
    assert runner.invoke(app, ["abandon", str(run_id), "--db", db_url]).exit_code == 0
    assert list_runs(engine)["status"].tolist() == ["failed"]
    again = runner.invoke(app, ["abandon", str(run_id), "--db", db_url])
    assert again.exit_code == 1 and "is not running" in again.output
    assert run_audit("credit-race", str(DEMO_CONFIG), db_url, END)["new"]  # nothing to wait for


# ---- timeouts ----------------------------------------------------------------------------------


@pytest.fixture
def silent_server():
    """A TCP server on 127.0.0.1 that accepts connections and never says a word."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted, stop = [], threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for connection in accepted:
        connection.close()
    listener.close()


@pytest.mark.usefixtures("prefect_harness")
def test_a_silent_server_fails_the_run_after_retries(silent_server, monkeypatch):
    """It fails a run against a server that accepts but never answers after the connect timeout
    and the retries, instead of hanging."""
    from biasaudit.flows.stages import RETRIES

    monkeypatch.setenv("BIASAUDIT_CONNECT_TIMEOUT_SECONDS", "1")
    url = f"postgresql://postgres@127.0.0.1:{silent_server}/none"
    started = time.monotonic()
    with pytest.raises(StepFailed, match="timeout|timed out"):
        audit_flow("credit-race", str(DEMO_CONFIG), url, END)
    elapsed = time.monotonic() - started
    # 1 + RETRIES connection attempts of about a second each, plus short backoffs (conftest)
    assert RETRIES * 1.0 <= elapsed < 60


def test_statement_timeout_ends_a_long_statement(postgres_server_url, monkeypatch):
    """It ends a statement that runs longer than BIASAUDIT_STATEMENT_TIMEOUT_SECONDS with an
    OperationalError (retried as transient), on PostgreSQL."""
    from biasaudit.db.retry import is_transient

    monkeypatch.setenv("BIASAUDIT_STATEMENT_TIMEOUT_SECONDS", "1")
    engine = make_engine(postgres_server_url)
    started = time.monotonic()
    with (
        pytest.raises(OperationalError, match="statement timeout") as error,
        engine.connect() as connection,
    ):
        connection.execute(text("SELECT pg_sleep(10)"))
    assert time.monotonic() - started < 5 and is_transient(error.value)
    engine.dispose()


# The report is written after the results' transaction has committed, in Python alone: a store's
# dialect plays no part in it.
@on_databases("sqlite")
def test_a_failing_report_leaves_the_committed_run_succeeded(db_url, monkeypatch, capsys):
    """It keeps a run that committed as succeeded when only its report fails, and says so."""
    load_small(db_url)

    def broken(*_):
        raise OSError("disk full (injected)")

    monkeypatch.setattr(biasaudit.flows.pipeline, "report", broken)
    result = run_audit("credit-race", str(DEMO_CONFIG), db_url, END)
    assert result["new"] and result["report"] is None
    assert "its report was not written: OSError: disk full" in capsys.readouterr().out
    assert list_runs(make_engine(db_url))["status"].tolist() == ["succeeded"]


def test_property_tests_are_deterministic_beside_prefects_event_pings():
    """A property test while Prefect's events websocket pings in a background thread (as it does
    in every test process that has run a flow): the pings draw from their own generator, so
    Hypothesis never sees the global random state move under its strategies."""
    import threading

    import websockets.asyncio.connection

    stop = threading.Event()

    def pinging() -> None:  # what each keepalive ping draws (websockets' Connection.ping)
        while not stop.is_set():
            websockets.asyncio.connection.random.getrandbits(32)

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.lists(st.integers(), min_size=1))
    def drawn_while_pinging(values: list[int]) -> None:
        assert len(values) >= 1

    thread = threading.Thread(target=pinging, daemon=True)
    thread.start()
    try:
        drawn_while_pinging()
    finally:
        stop.set()
        thread.join(timeout=10)
