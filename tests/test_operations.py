"""History and operations: comparison of runs, backfill, time series, views, deployment stack."""

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import yaml
from scipy import optimize, stats
from sklearn.metrics import roc_auc_score
from sqlalchemy import select, text
from typer.testing import CliRunner

from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import list_runs, metric_series, run_results
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.migrate import upgrade
from biasaudit.db.store.models import ComparisonResult
from biasaudit.flows.audit import run_audit
from biasaudit.flows.cli import app

from .conftest import COMPAS, on_databases

ROOT = Path(__file__).resolve().parents[1]
START = datetime(2026, 1, 1, tzinfo=UTC)


def period(rng, days, shift: float, n=3000):
    """n predictions over 30 days from START + days; race=Black's FPR raised by ``shift``."""
    race = rng.choice(["White", "Black", "Asian"], n, p=[0.6, 0.3, 0.1])
    sex = rng.choice(["F", "M"], n)
    y = rng.random(n) < 0.35
    fpr = np.where(race == "Black", 0.15 + shift, 0.15)
    pred = rng.random(n) < np.where(y, 0.75, fpr)
    return pd.DataFrame(
        {
            "prediction_id": [f"p{days}-{i}" for i in range(n)],
            "model_id": "m",
            "model_version": "1",
            "predicted_at": START
            + timedelta(days=days)
            + pd.to_timedelta(rng.uniform(0, 29.9, n), unit="D"),
            "y_true": y.astype(float),
            "y_pred": pred.astype(int),
            "race": race,
            "sex": sex,
        }
    )


# The comparison is computed from stored counts (the previous as-of's run found on every database
# by tests/test_monitor_db.py::test_previous_is_the_previous_as_of_and_overlaps_are_not_tested).
@on_databases("sqlite")
def test_compare_flags_only_real_changes(db_url, tmp_path):
    """It flags the FPR shift injected into one period, and nothing between two unchanged periods."""
    rng = np.random.default_rng(8)
    frames = [period(rng, 0, 0.0), period(rng, 30, 0.0), period(rng, 60, 0.15)]
    load_predictions(make_engine(db_url), pd.concat(frames), ["race", "sex"], "periods")
    config = tmp_path / "a.toml"
    config.write_text(
        '[[audits]]\nname = "a"\nmodel = "m"\nwindow = "last_30_days"\nattributes = ["race", "sex"]\n'
        'intersections = [["race", "sex"]]\nmetrics = ["fpr", "tpr", "ppr", "ppv"]\n'
    )
    run_ids = [
        run_audit("a", str(config), db_url, START + timedelta(days=d))["run_id"]
        for d in (30, 60, 90)
    ]
    engine = make_engine(db_url)
    unchanged = run_results(engine, ComparisonResult, run_ids[1])
    shifted = run_results(engine, ComparisonResult, run_ids[2])
    assert len(unchanged) == len(shifted) > 0 and (unchanged["status"] == "both").all()
    assert not unchanged["significant"].any()
    flagged = shifted[shifted["significant"]]
    assert ("race", "Black", "fpr") in set(
        zip(flagged["attribute"], flagged["group_name"], flagged["metric"])
    )
    # Groups with no Black members did not move; sex groups did (30% of them are Black).
    untouched = {"White", "Asian", "White x F", "White x M", "Asian x F", "Asian x M"}
    assert untouched.isdisjoint(flagged["group_name"])
    assert run_results(engine, ComparisonResult, run_ids[0]).empty  # first version: nothing before

    cli = CliRunner().invoke(app, ["compare", str(run_ids[2]), "--db", db_url, "--format", "json"])
    assert cli.exit_code == 0, cli.output
    rows = json.loads(cli.output)
    assert {(r["group_name"], r["metric"]) for r in rows} == set(
        zip(flagged["group_name"], flagged["metric"])
    )
    config.write_text(
        config.read_text() + '\n[[audits]]\nname = "b"\nmodel = "m"\nattributes = ["sex"]\n'
    )
    other = run_audit("b", str(config), db_url, START + timedelta(days=90))["run_id"]
    cli = CliRunner().invoke(app, ["compare", str(other), str(run_ids[2]), "--db", db_url])
    assert cli.exit_code == 1 and "compare runs of the same audit and model" in cli.output


def scored_period(rng, days, degraded: bool, n=3000):
    """n predictions over 30 days from START + days with a calibrated score in tenths (each
    outcome drawn with its score as its probability); ``degraded``: race=b's outcomes no longer
    follow its score (a rate of 0.4 whatever the score)."""
    race = rng.choice(["a", "b", "c"], n, p=[0.4, 0.4, 0.2])
    score = (1 + rng.binomial(8, np.where(race == "c", 0.6, 0.4))) / 10
    chance = np.where(degraded & (race == "b"), 0.4, score)
    return pd.DataFrame(
        {
            "prediction_id": [f"s{days}-{i}" for i in range(n)],
            "model_id": "m",
            "model_version": "1",
            "predicted_at": START
            + timedelta(days=days)
            + pd.to_timedelta(rng.uniform(0, 29.9, n), unit="D"),
            "y_true": (rng.random(n) < chance).astype(float),
            "y_pred": (score >= 0.5).astype(int),
            "score": score,
            "race": race,
        }
    )


def delong(y: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    """AUC and DeLong's variance from the rows, pair by pair: each positive's share of negatives
    below it and each negative's share of positives above it (ties 1/2), sample variances."""
    pos, neg = s[y == 1], s[y == 0]
    pairs = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    v10, v01 = pairs.mean(1), pairs.mean(0)
    return pairs.mean(), v10.var(ddof=1) / len(pos) + v01.var(ddof=1) / len(neg)


def recalibrated(y: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    """Calibration-in-the-large and slope by statsmodels' logistic GLM on the rows."""
    x = np.log(s / (1 - s))
    family = sm.families.Binomial()
    slope = sm.GLM(y, sm.add_constant(x), family=family).fit().params[1]
    large = sm.GLM(y, np.ones((len(y), 1)), family=family, offset=x).fit().params[0]
    return large, slope


def newcombe(auc: float, p: int, q: int, z: float) -> tuple[float, float]:
    """Newcombe's (2006, method 5) interval by root-finding: the θ with (A - θ)^2 = z^2 V(θ),
    V Hanley & McNeil's variance at θ with P - 1 and Q - 1 both (P + Q)/2 - 1."""
    n = (p + q) / 2 - 1

    def f(theta: float) -> float:
        v = theta * (1 - theta) * (1 + n * (1 - theta) / (2 - theta) + n * theta / (1 + theta))
        return (auc - theta) ** 2 - z * z * v / (p * q)

    return optimize.brentq(f, 0, auc, xtol=1e-14), optimize.brentq(f, auc, 1, xtol=1e-14)


@on_databases("sqlite", "postgresql")
def test_compare_of_scores_tests_each_groups_auc(db_url, tmp_path):
    """Two disjoint 30-day runs of a scored audit, race=b's outcomes unhinged from its score in
    the second: compare shows each group's AUC before and after as scikit-learn's roc_auc_score
    on each run's rows, its Newcombe interval found by root-finding (each group has under 1,000
    positives) and the test of two independent
    AUCs on the logit scale with DeLong variances computed pair by pair (BH-adjusted by scipy), calibration as
    statsmodels fits it; only b's change is significant."""
    rng = np.random.default_rng(11)
    frames = [scored_period(rng, 0, False), scored_period(rng, 30, True)]
    load_predictions(make_engine(db_url), pd.concat(frames), ["race"], "scored")
    config = tmp_path / "a.toml"
    config.write_text(
        '[[audits]]\nname = "a"\nmodel = "m"\nwindow = "last_30_days"\nattributes = ["race"]\n'
        'metrics = ["fpr", "fnr"]\ndecision = { score = "score", threshold = 0.5 }\n'
    )
    run_ids = [
        run_audit("a", str(config), db_url, START + timedelta(days=d))["run_id"] for d in (30, 60)
    ]
    cli = CliRunner().invoke(
        app, ["compare", str(run_ids[1]), "--db", db_url, "--scores", "--all", "--format", "csv"]
    )
    assert cli.exit_code == 0, cli.output
    got = pd.read_csv(io.StringIO(cli.output)).set_index("group_name")  # CSV: every digit
    assert sorted(got.index) == ["a", "b", "c"] and (got["status"] == "both").all()
    z = stats.norm.ppf(0.975)
    p_values = []
    for name in got.index:
        row = got.loc[name]
        aucs, variances = [], []
        for side, rows in zip(("before", "after"), frames, strict=True):
            part = rows[rows["race"] == name]
            y, s = part["y_true"].to_numpy(), part["score"].to_numpy()
            auc, variance = delong(y, s)
            assert auc == pytest.approx(roc_auc_score(y, s), abs=1e-12)
            assert row[f"auc_{side}"] == pytest.approx(auc, abs=1e-9)
            low, high = newcombe(auc, (y == 1).sum(), (y == 0).sum(), z)
            assert row[f"auc_low_{side}"] == pytest.approx(low, abs=1e-9)
            assert row[f"auc_high_{side}"] == pytest.approx(high, abs=1e-9)
            large, slope = recalibrated(y, s)
            assert row[f"in_the_large_{side}"] == pytest.approx(large, abs=1e-6)
            assert row[f"slope_{side}"] == pytest.approx(slope, abs=1e-6)
            aucs.append(auc)
            variances.append(variance)
        assert row["change"] == pytest.approx(aucs[1] - aucs[0], abs=1e-9)
        logits = [np.log(a / (1 - a)) for a in aucs]  # the delta method on the logit scale
        spread = sum(v / (a * (1 - a)) ** 2 for a, v in zip(aucs, variances, strict=True))
        z_change = (logits[1] - logits[0]) / np.sqrt(spread)
        p_values.append(2 * stats.norm.sf(abs(z_change)))
        assert row["p_value"] == pytest.approx(p_values[-1], rel=1e-6)
    adjusted = stats.false_discovery_control(p_values, method="bh")
    np.testing.assert_allclose(got["p_adjusted"], adjusted, rtol=1e-6)
    assert got["significant"].to_dict() == {"a": False, "b": True, "c": False}

    table = CliRunner().invoke(app, ["compare", str(run_ids[1]), "--db", db_url])
    assert table.exit_code == 0, table.output
    assert "score: AUC 1 significant changes (BH-adjusted p < 0.05) of 3 tested" in table.output
    metrics_only = CliRunner().invoke(
        app, ["compare", str(run_ids[1]), "--db", db_url, "--all", "--format", "json"]
    )
    assert {"metric", "value_before"} <= set(json.loads(metrics_only.output)[0])


def test_views_and_history_formats(db_url, tmp_path):
    """It serves the latest run per audit and the metric series through SQL views and the CLI."""
    rng = np.random.default_rng(9)
    load_predictions(
        make_engine(db_url),
        pd.concat([period(rng, 0, 0.0), period(rng, 30, 0.1)]),
        ["race", "sex"],
        "periods",
    )
    config = tmp_path / "a.toml"
    config.write_text(
        '[[audits]]\nname = "a"\nmodel = "m"\nwindow = "last_30_days"\nattributes = ["race"]\n'
    )
    for day in (30, 60):
        run_audit("a", str(config), db_url, START + timedelta(days=day))
    with make_engine(db_url).connect() as connection:
        latest = (
            connection.execute(text("SELECT version FROM latest_succeeded_runs")).scalars().all()
        )
        series = pd.read_sql(text("SELECT * FROM metric_series WHERE metric = 'fpr'"), connection)
    assert latest == [2]
    assert len(series) == 2 * 3 and set(series["version"]) == {1, 2}
    direct = metric_series(make_engine(db_url), "fpr", attribute="race")
    assert np.allclose(np.sort(series["value"]), np.sort(direct["value"]))
    runner = CliRunner()
    csv = runner.invoke(
        app,
        ["history", "--metric", "fpr", "--attribute", "race", "--db", db_url, "--format", "csv"],
    )
    table = pd.read_csv(io.StringIO(csv.output))
    assert (
        csv.exit_code == 0
        and len(table) == 2
        and {"Black", "White", "max - min"} <= set(table.columns)
    )
    runs = json.loads(runner.invoke(app, ["history", "--db", db_url, "--format", "json"]).output)
    assert [r["version"] for r in runs] == [2, 1]


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.skipif(not COMPAS.exists(), reason=f"{COMPAS} is absent")
def test_backfill_over_compas(tmp_path):
    """It writes one run per period over COMPAS's two years and shows the FPR gap by race."""
    from biasaudit.flows.backfill import backfill_flow

    url = f"sqlite:///{tmp_path / 'compas.db'}"
    upgrade(url)
    raw = pd.read_csv(COMPAS)
    frame = pd.DataFrame(
        {
            "prediction_id": raw["id"].astype(str),
            "model_id": "compas",
            "model_version": "1",
            "predicted_at": pd.to_datetime(raw["compas_screening_date"], utc=True),
            "y_true": raw["two_year_recid"].astype(float),
            "y_pred": (raw["score_text"] != "Low").astype(int),
            "race": raw["race"],
        }
    )
    load_predictions(make_engine(url), frame, ["race"], "compas")
    config = tmp_path / "compas.toml"
    config.write_text(
        '[[audits]]\nname = "compas"\nmodel = "compas"\nwindow = "last_90_days"\nattributes = ["race"]\n'
        'metrics = ["fpr", "fnr"]\nreference_groups = { race = "Caucasian" }\n'
    )
    start, end = datetime(2013, 4, 1, tzinfo=UTC), datetime(2014, 12, 31, tzinfo=UTC)
    outcomes = backfill_flow("compas", start, end, "90d", str(config), url)
    assert len(outcomes) == 9 and all("error" not in o for o in outcomes)
    runs = list_runs(make_engine(url), audit="compas", status="succeeded")
    assert sorted(runs["version"]) == list(range(1, 10))
    series = metric_series(make_engine(url), "fpr", attribute="race")
    wide = series.pivot(index="version", columns="group_name", values="value")
    sizes = series.pivot(index="version", columns="group_name", values="denominator")
    assert len(wide) == 9
    # Where both groups have 100+ actual negatives, ProPublica's FPR gap holds in every period.
    populated = (sizes["African-American"] >= 100) & (sizes["Caucasian"] >= 100)
    assert populated.sum() >= 4
    assert (wide.loc[populated, "African-American"] > wide.loc[populated, "Caucasian"]).all()
    # The data's late screenings are nearly all reoffenders (the two-year follow-up filter keeps
    # few others), so FPR has no actual negatives there: undefined, not zero.
    assert wide["African-American"].iloc[-2:].isna().all()
    cli = CliRunner().invoke(
        app, ["history", "--metric", "fpr", "--attribute", "race", "--db", url]
    )
    assert cli.exit_code == 0 and "African-American" in cli.output


def test_docker_compose_structure():
    """It defines PostgreSQL, a Prefect server on PostgreSQL and a worker, with health checks."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "prefect-server", "worker", "grafana"}
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["prefect-server"]["image"].startswith("prefecthq/prefect:3.9")
    assert (
        "postgresql+asyncpg://"
        in services["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"]
    )
    worker = services["worker"]
    assert worker["build"] == "." and worker["command"][0].startswith("biasaudit deploy")
    assert worker["environment"]["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    assert worker["environment"]["BIASAUDIT_DATABASE_URL"].startswith("postgresql+psycopg://")
    for name in ("postgres", "prefect-server"):
        assert services[name]["healthcheck"]["test"]
    assert worker["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert worker["depends_on"]["prefect-server"]["condition"] == "service_healthy"
    assert "postgres-data" in compose["volumes"]
    assert any(v.startswith("postgres-data:") for v in services["postgres"]["volumes"])
    assert (ROOT / "Dockerfile").exists() and (ROOT / "db" / "docker-init").is_dir()


AUDIT_OWNER_SCRIPT = ROOT / "db" / "docker-init" / "02-audit-owner.sh"


def test_docker_compose_worker_connects_as_the_audit_databases_owner():
    """The worker reaches the audit database as the role the init script creates and makes its
    owner (BIASAUDIT_DB_USER), never as the image's superuser (POSTGRES_USER); the script gets
    that role's name, password and database from the postgres service's environment."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    store = services["postgres"]["environment"]
    url = services["worker"]["environment"]["BIASAUDIT_DATABASE_URL"]
    assert url == (
        "postgresql+psycopg://${BIASAUDIT_DB_USER:-biasaudit}:${BIASAUDIT_DB_PASSWORD}"
        "@postgres:5432/${BIASAUDIT_DB:-biasaudit}"
    )
    assert store["BIASAUDIT_DB_USER"] == "${BIASAUDIT_DB_USER:-biasaudit}"
    assert store["BIASAUDIT_DB_PASSWORD"].startswith("${BIASAUDIT_DB_PASSWORD:?")
    assert store["BIASAUDIT_DB"] == "${BIASAUDIT_DB:-biasaudit}"
    assert store["POSTGRES_USER"] == "${POSTGRES_USER:-postgres}" and "POSTGRES_DB" not in store
    assert AUDIT_OWNER_SCRIPT.stat().st_mode & 0o111  # executed by the image, not sourced
    script = AUDIT_OWNER_SCRIPT.read_text()
    for name in ("BIASAUDIT_DB_USER", "BIASAUDIT_DB_PASSWORD", "BIASAUDIT_DB"):
        assert f'"${name}"' in script


def test_the_docker_init_owner_is_no_superuser_and_runs_the_store(postgres_server_url):
    """The init script's SQL, run with psql as the image runs it (a private role and database),
    makes a role without superuser, role or database creation rights that owns the audit
    database: it migrates it, and cannot read the role passwords (pg_shadow, pg_authid)."""
    import re
    import shutil
    import subprocess
    import uuid

    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ProgrammingError

    psql = shutil.which("psql")
    assert psql, "the psql client is needed to run the init script's SQL"
    sql = re.search(
        r"<<'SQL'\n(.*?)^SQL$", AUDIT_OWNER_SCRIPT.read_text(), re.DOTALL | re.MULTILINE
    )
    assert sql is not None
    server = make_url(postgres_server_url)
    suffix = uuid.uuid4().hex[:10]
    owner, database, password = f"biasaudit_owner_{suffix}", f"biasaudit_{suffix}", "pw-" + suffix
    admin = create_engine(server.set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    try:
        done = subprocess.run(
            [psql, "-X", "-v", "ON_ERROR_STOP=1", "-h", server.host or "127.0.0.1"]
            + ["-p", str(server.port or 5432), "-U", server.username or "postgres"]
            + ["--dbname", "postgres", "-v", f"owner={owner}", "-v", f"password={password}"]
            + ["-v", f"database={database}"],
            input=sql.group(1),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        with admin.connect() as connection:
            role = connection.execute(
                text(
                    "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, "
                    "rolcanlogin FROM pg_roles WHERE rolname = :r"
                ),
                {"r": owner},
            ).one()
            owned_by = connection.scalar(
                text("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = :d"),
                {"d": database},
            )
        assert tuple(role) == (False, False, False, False, False, True) and owned_by == owner
        url = server.set(
            drivername="postgresql+psycopg", username=owner, password=password, database=database
        ).render_as_string(hide_password=False)
        upgrade(url)  # the owner migrates its database
        engine = make_engine(url)
        for catalogue in ("pg_catalog.pg_shadow", "pg_catalog.pg_authid"):
            with pytest.raises(ProgrammingError, match="permission denied"), engine.connect() as c:
                c.execute(text(f"SELECT * FROM {catalogue}"))
        engine.dispose()
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
            connection.execute(text(f'DROP ROLE IF EXISTS "{owner}"'))
        admin.dispose()


def test_nightly_deployment_schedule_and_parameters():
    """It schedules the nightly flow by cron in a time zone, with its parameters: the schedule
    too, from which each run's window ends at its nominal instant (tests/test_windows.py)."""
    from biasaudit.flows.nightly import nightly_deployment

    deployment = nightly_deployment(
        "/etc/biasaudit.toml", "postgresql://db/audit", "30 1 * * *", "Europe/Paris"
    )
    (schedule,) = deployment.schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone) == ("30 1 * * *", "Europe/Paris")
    assert deployment.parameters == {
        "config_path": "/etc/biasaudit.toml",
        "db_url": "postgresql://db/audit",
        "cron": "30 1 * * *",
        "timezone": "Europe/Paris",
    }
    assert deployment.name == "nightly"


# Concurrent audits writing to each database (threads); the Dask cluster once, on SQLite (and on
# PostgreSQL through a real server in tests/test_server.py).
@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize(
    ("db_url", "runner"),
    [("sqlite", "threads"), ("postgresql", "threads"), ("mariadb", "threads"), ("sqlite", "dask")],
    indirect=["db_url"],
)
def test_nightly_fans_out_over_audits(db_url, runner):
    """It runs every audit of the nightly flow on the task runner, a local Dask cluster included."""
    from biasaudit.flows.demo import END, GROUPS, synthetic_predictions
    from biasaudit.flows.nightly import with_task_runner

    from .conftest import DEMO_CONFIG

    data = synthetic_predictions()
    latest = data.groupby("model_id").tail(3000)  # inside every demo window, 30 days included
    load_predictions(make_engine(db_url), latest, list(GROUPS), "demo")
    results = with_task_runner(runner, workers=2)(str(DEMO_CONFIG), db_url, END)
    assert sorted(r["audit"] for r in results) == [
        "claims-recent",
        "credit-race",
        "fraud-all",
        "hiring-sex",
    ]
    runs = list_runs(make_engine(db_url))
    assert len(runs) == 4 and set(runs["status"]) == {"succeeded"}


# ---- nightly operations -------------------------------------------------------------------------

TWO_AUDITS = (
    '[[audits]]\nname = "credit-race"\nmodel = "credit-scorer"\nattributes = ["race"]\n'
    'metrics = ["fpr", "tpr"]\n'
    '[[audits]]\nname = "broken"\nmodel = "credit-scorer"\nattributes = ["race"]\n'
    'windw = "all"\n'
)


def _load_credit(url):
    from biasaudit.flows.demo import GROUPS, synthetic_predictions

    data = synthetic_predictions()
    data = data[data["model_id"] == "credit-scorer"].head(3000)
    load_predictions(make_engine(url), data, list(GROUPS), "test")


# The retry is injected in Python (a persist retried on each database: tests/test_reliability.py::
# test_connection_dropped_during_persist_is_retried); the isolation of a broken audit is the flow's.
@pytest.mark.usefixtures("prefect_harness")
@on_databases("sqlite")
def test_nightly_isolates_a_broken_audit_and_retries_database_steps(db_url, tmp_path, monkeypatch):
    """It completes the good audit (its persist step retried after a dropped connection, as in a
    single run), fails only the audit with a configuration typo, and names it in the summary."""
    from sqlalchemy.exc import OperationalError

    import biasaudit.flows.pipeline
    from biasaudit.flows.demo import END
    from biasaudit.flows.nightly import AuditsFailed, nightly_flow

    _load_credit(db_url)
    config = tmp_path / "two.toml"
    config.write_text(TWO_AUDITS)
    original, attempts = biasaudit.flows.pipeline.save_run, {"n": 0}

    def flaky(*args, **kwargs):
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise OperationalError("INSERT ...", {}, ConnectionResetError("connection reset"))
        return original(*args, **kwargs)

    monkeypatch.setattr(biasaudit.flows.pipeline, "save_run", flaky)
    with pytest.raises(AuditsFailed) as failure:
        nightly_flow(str(config), db_url, END)
    message = str(failure.value)
    assert message.startswith("1 of 2 audits failed: broken (ConfigError:")
    assert "windw" in message and "credit-race" not in message
    assert attempts["n"] == 2  # the nightly path retried the database step
    runs = list_runs(make_engine(db_url))
    assert runs[["audit_name", "status"]].values.tolist() == [["credit-race", "succeeded"]]


def test_periods_cover_the_whole_range_by_calendar():
    """It steps by calendar days or months and always ends at the range's end."""
    from biasaudit.flows.backfill import parse_period, periods

    start, end = datetime(2026, 1, 31, tzinfo=UTC), datetime(2026, 5, 15, tzinfo=UTC)
    months = periods(start, end, parse_period("1mo"))
    assert [m.date().isoformat() for m in months] == [
        "2026-01-31",
        "2026-02-28",
        "2026-03-31",
        "2026-04-30",
        "2026-05-15",
    ]
    weeks = periods(start, start + timedelta(days=14), parse_period("7d"))
    assert [(m - start).days for m in weeks] == [0, 7, 14]
    assert periods(start, start, parse_period("1d")) == [start]
    for bad in ("0d", "1w", "mo", "-1d"):
        with pytest.raises(ValueError):
            parse_period(bad)


def test_cli_prints_data_as_text_and_exports_runs(tmp_path):
    """It prints group names such as '[/]' and '[bold]x' as they are, exports a run's results as
    CSV and JSON, and lists quarantined rows with their rule."""
    from biasaudit.flows.demo import END

    url = f"sqlite:///{tmp_path / 'markup.db'}"
    upgrade(url)
    rng = np.random.default_rng(3)
    frame = period(rng, 0, 0.0, n=2000)
    frame["race"] = frame["race"].map({"White": "[/]", "Black": "[bold]x", "Asian": "Asian"})
    frame.loc[frame.index[:3], "y_pred"] = 7  # quarantined by the run's validation? no: by load
    load_predictions(make_engine(url), frame, ["race"], "markup.csv")
    config = tmp_path / "m.toml"
    config.write_text('[[audits]]\nname = "m"\nmodel = "m"\nattributes = ["race"]\n')
    run_id = run_audit("m", str(config), url, END)["run_id"]
    runner = CliRunner()
    shown = runner.invoke(app, ["history", str(run_id), "--db", url])
    assert shown.exit_code == 0, shown.output
    assert "[/]" in shown.output and "[bold]x" in shown.output
    exported = runner.invoke(app, ["history", str(run_id), "--db", url, "--format", "csv"])
    table = pd.read_csv(io.StringIO(exported.output))
    assert exported.exit_code == 0 and set(table["group_name"]) >= {"[/]", "[bold]x", "Asian"}
    assert set(table["run_id"]) == {run_id}
    records = json.loads(
        runner.invoke(app, ["history", str(run_id), "--db", url, "--format", "json"]).output
    )
    assert len(records) == len(table)
    quarantined = runner.invoke(app, ["quarantine", "--load", "--db", url, "--format", "json"])
    rows = json.loads(quarantined.output)
    assert len(rows) == 3 and {r["column_name"] for r in rows} == {"y_pred"}
    assert all(r["rule"] for r in rows) and all(r["run_id"] is None for r in rows)
    listed = runner.invoke(app, ["quarantine", str(run_id), "--db", url])
    assert listed.exit_code == 0 and "no quarantined rows" in listed.output


def test_result_values_are_stored_exactly(db_url):
    """It stores a result frame's values as they are on every database (PostgreSQL through COPY):
    NaN as NULL, +-infinity, integers held as floats, text with tabs, newlines, backslashes,
    quotes and non-ASCII characters."""
    from biasaudit.db.store.models import GroupCount, MetricResult
    from biasaudit.db.store.runs import release_run, save_run, start_run
    from biasaudit.flows.config_files import load_audit
    from biasaudit.flows.pipeline import new_record

    from .conftest import DEMO_CONFIG

    text_values = ["a\tb", "line\nbreak", "back\\slash", 'quote\'s "q"', "Ünïcødé ✓", "\\N"]
    metrics = pd.DataFrame(
        {
            "attribute": "race",
            "group_name": text_values,
            "subset": "all",
            "metric": "tpr",
            "estimator": "plain",
            "value": [0.1, np.nan, np.inf, -np.inf, 1e-300, 0.1 + 0.2],
            "numerator": [1.0, 2.0, np.nan, 4.0, 5.0, 6.0],
            "denominator": 7.0,
            "undefined_reason": [None, "zero denominator", None, None, None, "x\ty"],
        }
    )
    counts = pd.DataFrame(
        {
            "attribute": "race",
            "group_name": ["A", "B"],
            "subset": "all",
            "tp": [3.0, 2**40],
            "fp": [0, 1],
            "fn": [1.0, 0.0],
            "tn": [5, 6],
            "n_unlabelled": [0.0, 2.0],
            "unlabelled_pos": [np.nan, 1.0],
            "unlabelled_neg": [np.nan, 1.0],
        }
    )
    engine = make_engine(db_url)
    record = new_record(load_audit(DEMO_CONFIG, "credit-race"), datetime(2026, 1, 1, tzinfo=UTC))
    run_id = start_run(engine, record)
    try:
        save_run(
            engine, run_id, record, {MetricResult: metrics, GroupCount: counts}, pd.DataFrame()
        )
    finally:
        release_run(run_id)
    with engine.connect() as connection:
        stored, stored_counts = (  # read through the column types, as db.store.history reads
            pd.DataFrame(connection.execute(select(model).where(model.c.run_id == run_id)).all())
            for model in (MetricResult.__table__, GroupCount.__table__)
        )
    stored_counts = stored_counts.sort_values("group_name")
    stored = stored.set_index("group_name").loc[text_values]
    assert stored["value"].tolist() == pytest.approx(metrics["value"].tolist(), nan_ok=True)
    assert stored["value"].iloc[4] == 1e-300 and stored["value"].iloc[5] == 0.1 + 0.2
    assert stored["numerator"].isna().tolist() == metrics["numerator"].isna().tolist()
    assert stored["undefined_reason"].tolist() == metrics["undefined_reason"].tolist()
    assert stored_counts["tp"].tolist() == [3, 2**40]
    assert stored_counts["unlabelled_pos"].isna().tolist() == [True, False]
