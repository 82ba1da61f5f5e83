"""The Grafana dashboard (db/grafana) over the store's views: every query it runs, expanded as
Grafana expands its macros and variables, runs on PostgreSQL against the demo's store plus a
monitored audit over twelve nights and a configuration change, and returns the series that the
base tables (not the views) give, computed here with pandas."""

from __future__ import annotations

import json
import re
from contextlib import redirect_stdout
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
import yaml
from sqlalchemy import text

from biasaudit.db.engine import make_engine
from biasaudit.db.store.load import load_predictions
from biasaudit.flows.demo import END, GROUPS, START, synthetic_predictions
from biasaudit.flows.pipeline import run_audit

from .conftest import DEMO_CONFIG, separate_database

ROOT = Path(__file__).resolve().parents[1]
GRAFANA = ROOT / "db" / "grafana"
DASHBOARD = json.loads((GRAFANA / "dashboards" / "biasaudit.json").read_text())
FROM, TO = START - timedelta(days=1), END + timedelta(days=1)
NIGHTLY = """
[[audits]]
name = "credit-nightly"
model_id = "credit-scorer"
window = "last_5_days"
attributes = ["race", "sex"]
metrics = ["tpr", "fpr"]
reference_groups = { race = "White" }
[audits.thresholds]
bootstrap_replicates = 100
[audits.monitor]
"""  # the monitor's default metrics, ppr among them, which detection here does not test
NIGHTS = [START + timedelta(days=5 * k) for k in range(1, 13)]  # 09-06 .. 10-30 (END)


def grafana_sql(sql: str, values: dict[str, str], since=FROM, until=TO) -> str:
    """``sql`` as Grafana's PostgreSQL data source sends it: ``${name:sqlstring}`` the value
    quoted, its quotes doubled; ``$__timeFilter(column)`` the dashboard's time range as
    ``column BETWEEN 'from' AND 'to'`` (RFC 3339, UTC; by default the whole test's time range).
    Anything else left with a ``$`` fails."""
    sql = re.sub(
        r"\$\{(\w+):sqlstring\}", lambda m: "'" + values[m.group(1)].replace("'", "''") + "'", sql
    )
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    sql = re.sub(
        r"\$__timeFilter\(([\w.]+)\)",
        lambda m: f"{m.group(1)} BETWEEN '{since:{stamp}}' AND '{until:{stamp}}'",
        sql,
    )
    assert "$" not in sql, sql
    return sql


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The demo's store in PostgreSQL (its four audits as of the demo's end), then a monitored
    audit of the credit model every five days, then once more with a changed configuration."""
    folder = tmp_path_factory.mktemp("dashboard")
    with separate_database("postgresql", folder) as url:
        load_predictions(make_engine(url), synthetic_predictions(), list(GROUPS), "demo")
        nightly = folder / "nightly.toml"
        nightly.write_text(NIGHTLY)
        changed = folder / "changed.toml"
        pinned = 'window = "last_5_days"\nmodel_version = "2.3"'
        changed.write_text(NIGHTLY.replace('window = "last_5_days"', pinned))
        demo_audits = re.findall(r'^name = "([^"]+)"', DEMO_CONFIG.read_text(), re.MULTILINE)
        with redirect_stdout(StringIO()):
            for name in demo_audits:
                run_audit(name, str(DEMO_CONFIG), url, END)
            for night in NIGHTS:
                run_audit("credit-nightly", str(nightly), url, night)
            run_audit("credit-nightly", str(changed), url, END + timedelta(hours=1))
        yield url


def _query(url: str, sql: str, values: dict[str, str], **window) -> pd.DataFrame:
    with make_engine(url).connect() as connection:
        return pd.read_sql_query(text(grafana_sql(sql, values, **window)), connection)


def _tables(url: str) -> dict[str, pd.DataFrame]:
    with make_engine(url).connect() as connection:
        return {
            name: pd.read_sql_query(text(f"SELECT * FROM {name}"), connection)
            for name in ("audit_runs", "metric_results", "detection_results", "monitor_results")
        }


def _joined(tables: dict[str, pd.DataFrame], results: str, audit: str) -> pd.DataFrame:
    runs = tables["audit_runs"]
    runs = runs[(runs["status"] == "succeeded") & (runs["audit_name"] == audit)]
    return tables[results].merge(runs, left_on="run_id", right_on="id", suffixes=("", "_run"))


def _utc(column: pd.Series) -> pd.Series:
    return pd.to_datetime(column, utc=True)


VALUES = {"audit": "credit-nightly", "attribute": "race", "metric": "fpr"}


def test_every_query_of_the_dashboard_returns_what_the_base_tables_give(store):
    tables = _tables(store)
    queries = {v["name"]: v["query"] for v in DASHBOARD["templating"]["list"]}
    queries |= {p["title"]: p["targets"][0]["rawSql"] for p in DASHBOARD["panels"]}
    queries |= {a["name"]: a["target"]["rawSql"] for a in DASHBOARD["annotations"]["list"]}
    got = {name: _query(store, sql, VALUES) for name, sql in queries.items()}
    runs = tables["audit_runs"]
    succeeded = runs[runs["status"] == "succeeded"]
    checked = set()

    # variables: the audits, then the audit's attributes and the attribute's metrics
    assert got["audit"].iloc[:, 0].tolist() == sorted(succeeded["audit_name"].unique())
    demo_audits = {"credit-race", "hiring-sex", "fraud-all", "claims-recent"}
    assert demo_audits <= set(got["audit"].iloc[:, 0])
    detections = _joined(tables, "detection_results", "credit-nightly")
    assert got["attribute"].iloc[:, 0].tolist() == sorted(detections["attribute"].unique())
    race = detections[detections["attribute"] == "race"]
    monitored = _joined(tables, "monitor_results", "credit-nightly")
    watched = set(monitored.loc[monitored["attribute"] == "race", "metric"])
    assert got["metric"].iloc[:, 0].tolist() == sorted(set(race["metric"]) | watched)
    assert got["metric"].iloc[:, 0].tolist() == ["fpr", "ppr", "tpr"]
    checked |= {"audit", "attribute", "metric"}

    # the raw rate per group at every run
    metrics = _joined(tables, "metric_results", "credit-nightly")
    metrics = metrics[
        (metrics["subset"] == "group") & (metrics["estimator"] == "raw")
        & (metrics["attribute"] == "race") & (metrics["metric"] == "fpr")
    ]  # fmt: skip
    expected = metrics.assign(time=_utc(metrics["as_of"])).sort_values(["time", "group_name"])
    rates = got["${metric} per group of ${attribute}"]
    assert _utc(rates["time"]).tolist() == expected["time"].tolist()
    assert rates["metric"].tolist() == expected["group_name"].tolist()
    assert rates["value"].tolist() == pytest.approx(expected["value"].tolist(), nan_ok=True)
    assert len(set(rates["time"])) == len(NIGHTS) + 1  # a series over nights
    since = NIGHTS[5] - timedelta(hours=1)  # the dashboard's time range, narrowed: 7 of 13 runs
    later = _query(store, queries["${metric} per group of ${attribute}"], VALUES, since=since)
    assert len(set(later["time"])) == len(NIGHTS) - 5 + 1
    assert later.equals(rates[_utc(rates["time"]) >= since].reset_index(drop=True))
    checked.add("${metric} per group of ${attribute}")

    # detection's difference and its interval
    fpr = race[race["metric"] == "fpr"].assign(time=lambda f: _utc(f["as_of"]))
    fpr = fpr.assign(name=fpr["group_name"] + " vs " + fpr["reference"])
    fpr = fpr.sort_values(["time", "name"])
    diffs = got["${metric}: difference to the reference, with its interval"]
    assert diffs["metric"].tolist() == fpr["name"].tolist()
    for column, source in [("difference", "difference"), ("interval_low", "hdi_low"),
                           ("interval_high", "hdi_high")]:  # fmt: skip
        assert diffs[column].tolist() == pytest.approx(fpr[source].tolist(), nan_ok=True)
    checked.add("${metric}: difference to the reference, with its interval")

    # flags: every flagged row of the audit, among them the injected disparity
    flagged = detections[detections["flagged"]].sort_values("as_of")
    flags = got["Flagged disparities"]
    assert len(flags) == len(flagged) > 0 and set(flags["tags"]) == {"flagged"}
    assert any(t.startswith("Black fpr vs White: difference 0.1") for t in flags["text"])
    assert sorted(_utc(flags["time"])) == sorted(_utc(flagged["as_of"]))
    checked.add("Flagged disparities")

    # alarms: every row the monitor alarmed on (of every metric it watches, ppr among them)
    alarmed = monitored[monitored["alarm"]]
    alarms = got["Monitor alarms"]
    assert len(alarms) == len(alarmed) > 0 and set(alarms["tags"]) == {"alarm"}
    assert all("monitor alarm" in t for t in alarms["text"])
    assert sorted(_utc(alarms["time"])) == sorted(_utc(alarmed["as_of"]))
    checked.add("Monitor alarms")

    # changes: the model's first run, and the run whose configuration named a model version
    own = succeeded[succeeded["audit_name"] == "credit-nightly"].sort_values(["as_of", "id"])
    changes = got["Model, configuration and biasaudit changes"]
    first, last = own.iloc[0], own.iloc[-1]
    assert changes["text"].tolist() == [
        f"run {first['id']} (v{first['version']}): first run of credit-scorer",
        f"run {last['id']} (v{last['version']}): model version any -> 2.3; configuration changed",
    ]
    checked.add("Model, configuration and biasaudit changes")

    # the latest run's flagged or alarmed rows, largest difference first
    newest = own.loc[own["version"].idxmax(), "id"]
    latest = got["Flagged or alarmed in the latest run"]
    alarm_now = set(
        monitored.loc[(monitored["run_id"] == newest) & monitored["alarm"], "group_name"]
    )
    flag_now = set(detections.loc[(detections["run_id"] == newest) & detections["flagged"],
                                  "group_name"])  # fmt: skip
    assert set(latest["run_id"]) == {newest} and set(latest["group_name"]) == flag_now | alarm_now
    assert latest["difference"].abs().is_monotonic_decreasing
    checked.add("Flagged or alarmed in the latest run")

    # every run, with its count of flags
    listed = got["Runs"]
    assert sorted(listed["run_id"]) == sorted(own["id"])
    counts = flagged.groupby("run_id").size()
    assert dict(zip(listed["run_id"], listed["flagged"])) == {
        run: int(counts.get(run, 0)) for run in own["id"]
    }
    checked.add("Runs")
    assert checked == set(queries)  # a query added to the dashboard is a query tested here


def test_a_value_with_quotes_reaches_the_database_as_one_literal(store):
    """Group and audit names of any alphabet: a variable's value is quoted by ``sqlstring``."""
    sql = DASHBOARD["templating"]["list"][1]["query"]
    assert _query(store, sql, {"audit": "it's; DROP TABLE audit_runs"}).empty
    assert not _query(store, "SELECT count(*) FROM audit_runs", {}).empty


def test_compose_provisions_the_dashboard_and_its_data_source():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    grafana = services["grafana"]
    assert "./db/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    assert "./db/grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana["volumes"]
    assert grafana["depends_on"]["postgres"]["condition"] == "service_healthy"
    source = yaml.safe_load((GRAFANA / "provisioning/datasources/biasaudit.yml").read_text())
    (datasource,) = source["datasources"]
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/biasaudit.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    uses = {p["datasource"]["uid"] for p in DASHBOARD["panels"]}
    uses |= {a["datasource"]["uid"] for a in DASHBOARD["annotations"]["list"]}
    uses |= {v["datasource"]["uid"] for v in DASHBOARD["templating"]["list"]}
    assert uses == {datasource["uid"]}
    assert datasource["type"] == "grafana-postgresql-datasource"
    for name in ("BIASAUDIT_GRAFANA_USER", "BIASAUDIT_GRAFANA_PASSWORD", "BIASAUDIT_DB"):
        assert name in grafana["environment"]  # what the data source file reads
    assert "password" not in json.dumps(datasource["jsonData"]).lower()
    assert datasource["secureJsonData"]["password"] == "$BIASAUDIT_GRAFANA_PASSWORD"
