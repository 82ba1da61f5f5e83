"""No setting is accepted and then refused: every key of the configuration models, set to a valid
value other than its default, passes ``biasaudit audits`` and ``biasaudit run`` alike (or would be
refused by ``audits`` already), and the stored run holds it.

The keys are read from the pydantic models (schemas/config.py), so a key added later fails here
until it has a sample value below.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel
from sqlalchemy import select
from typer.testing import CliRunner

from biasaudit.db.engine import make_engine
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.models import AuditRun
from biasaudit.flows.cli import app
from biasaudit.flows.demo import GROUPS, synthetic_predictions
from biasaudit.schemas.config import Audit

from .conftest import separate_database

pytestmark = pytest.mark.usefixtures("prefect_harness")
runner = CliRunner()
AS_OF = "2026-10-31"
WAREHOUSE = "warehouse.db"  # the source_db of the samples, beside the store
PASSWORD_ENV = "BIASAUDIT_TEST_WAREHOUSE_PASSWORD"
BASE = {
    "name": "k",
    "model_id": "credit-scorer",
    "attributes": ["race", "sex"],
    "thresholds": {"bootstrap_replicates": 100},  # the smallest allowed: fast
}
FLAT = "flat"  # the predictions as a table with canonical and attribute columns
REMOTE = "remote"  # the same in the warehouse only: read from the store, it is missing
RENAMED = {"prediction_id": "pid", "predicted_at": "at", "y_true": "label", "race": "ethnicity"}
# key -> settings merged into BASE (the key itself and what it needs), each a valid value that is
# not the key's default.
SAMPLES: dict[str, dict] = {
    "name": {"name": "renamed-audit"},
    "model_id": {"model_id": "hiring-screen"},
    "model_version": {"model_version": "2.3"},
    "source": {"source": FLAT},
    "source_db": {"source_db": WAREHOUSE, "source": REMOTE},
    "source_db_password_env": {
        "source_db": WAREHOUSE,
        "source": REMOTE,
        "source_db_password_env": PASSWORD_ENV,
    },
    "columns": {"source": "renamed", "columns": RENAMED},
    "decision.score": {"decision": {"score": "score", "threshold": 0.5}},
    "decision.threshold": {"decision": {"score": "score", "threshold": 0.7}},
    "window": {"window": "last_30_days"},
    "attributes": {"attributes": ["race", "sex", "age_band"]},
    "intersections": {"intersections": [["race", "sex"]]},
    "metrics": {"metrics": ["tpr", "fpr"]},
    "reference_groups": {"reference_groups": {"race": "White"}},
    "thresholds.max_invalid_fraction": {"thresholds": {"max_invalid_fraction": 0.2}},
    "thresholds.tolerance": {"thresholds": {"tolerance": 0.1}},
    "thresholds.alpha": {"thresholds": {"alpha": 0.1}},
    "thresholds.power": {"thresholds": {"power": 0.9}},
    "thresholds.min_group_size": {"thresholds": {"min_group_size": 50}},
    "thresholds.stale_run_hours": {"thresholds": {"stale_run_hours": 2.0}},
    "thresholds.bootstrap_replicates": {"thresholds": {"bootstrap_replicates": 200}},
    "thresholds.planning_tau": {"thresholds": {"planning_tau": 0.2}},
    "thresholds.match_reference_ratio": {"thresholds": {"match_reference_ratio": 10.0}},
    "thresholds.planning_power": {"thresholds": {"planning_power": "exact"}},
    "smoothing.cps_lambda": {"smoothing": {"cps_lambda": 2.0}},
    "smoothing.additive_pseudocount": {"smoothing": {"additive_pseudocount": 0.5}},
    "scan.mode": {"scan": {"mode": "pushdown"}},
    "scan.chunk_rows": {"scan": {"mode": "stream", "chunk_rows": 1000}},
    "scan.ids_unique": {"scan": {"mode": "pushdown", "ids_unique": True}},
    "monitor.label_delay_days": {"monitor": {"label_delay_days": 7.0}},
    "monitor.metrics": {"monitor": {"metrics": ["tpr"]}},
    "monitor.half_life": {"monitor": {"half_life": 3.0}},
}


def _model_of(annotation) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (``Decision | None`` holds Decision)."""
    for option in (annotation, *typing.get_args(annotation)):
        if isinstance(option, type) and issubclass(option, BaseModel):
            return option
    return None


def config_keys(model: type[BaseModel] = Audit, prefix: str = "") -> list[str]:
    """Every leaf key of an audit, dotted through the nested models ([audits.thresholds], ...)."""
    keys = []
    for name, field in model.model_fields.items():
        nested = _model_of(field.annotation)
        keys += config_keys(nested, f"{prefix}{name}.") if nested else [f"{prefix}{name}"]
    return keys


def _at(data: dict, key: str):
    for part in key.split("."):
        data = data[part]
    return data


def _merged(base: dict, settings: dict) -> dict:
    """``base`` with ``settings``, nested tables merged."""
    out = dict(base)
    for key, value in settings.items():
        out[key] = {**out[key], **value} if isinstance(value, dict) and key in out else value
    return out


def _toml(audit: dict, folder: Path) -> str:
    """The audit as a TOML file, its dicts as sub-tables (JSON scalars and arrays are TOML
    values here); source_db made a URL of the folder's warehouse."""
    if "source_db" in audit:
        audit = {**audit, "source_db": f"sqlite:///{folder / audit['source_db']}"}
    values = {k: v for k, v in audit.items() if not isinstance(v, dict)}
    lines = ["[[audits]]", *(f"{k} = {json.dumps(v)}" for k, v in values.items())]
    for table, entries in audit.items():
        if isinstance(entries, dict):
            lines.append(f"[audits.{table}]")
            lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in entries.items()]
    path = folder / f"{audit['name']}.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def exit_code(args: list[str]) -> int:
    """The exit code of ``biasaudit ARGS`` called in this process with its own streams (a flow's
    Prefect logging outlives CliRunner's, which close after each call)."""
    code = app(args, standalone_mode=False)
    return 0 if code is None else int(code)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A migrated SQLite store holding two demo models' predictions (a sample over the 60 days),
    the same rows as a flat table and as a table with renamed columns, and a warehouse file with
    the flat table."""
    folder = tmp_path_factory.mktemp("every-key")
    data = synthetic_predictions()
    data = data[data["model_id"].isin(["credit-scorer", "hiring-screen"])]
    data = data.sample(4000, random_state=0).sort_values("predicted_at")
    with separate_database("sqlite", folder) as url:
        engine = make_engine(url)
        load_predictions(engine, data, list(GROUPS), "every-key")
        data.to_sql(FLAT, engine, index=False)
        data.rename(columns=RENAMED).to_sql("renamed", engine, index=False)
        engine.dispose()
        warehouse = make_engine(f"sqlite:///{folder / WAREHOUSE}")
        data.to_sql(REMOTE, warehouse, index=False)
        warehouse.dispose()
        yield url, folder


# Keys that change which rows are read and how: each also with a monitor, which reads the source
# again for its increment.
READING = ["source", "source_db", "columns", "decision.threshold", "model_version", "scan.mode"]
MONITORED = {"monitor": {"label_delay_days": 7.0}}


def test_every_key_has_a_sample():
    """It has a sample value for every key of the models, and none for a key they lack."""
    assert set(SAMPLES) == set(config_keys())


@pytest.mark.parametrize(
    ("key", "extra"),
    [pytest.param(key, {}, id=key) for key in config_keys()]
    + [pytest.param(key, MONITORED, id=f"{key}+monitor") for key in READING],
)
def test_every_key_works_in_audits_and_run(store, key, extra, monkeypatch):
    """It accepts each key at a non-default value in ``audits`` and in ``run`` (those that change
    how rows are read also with a monitor), and stores it."""
    url, folder = store
    assert key in SAMPLES, f"no sample value for the configuration key {key}: add one to SAMPLES"
    monkeypatch.setenv(PASSWORD_ENV, "unused-by-sqlite")
    audit = _merged(_merged(BASE, SAMPLES[key]), extra)
    path = _toml(audit, folder)
    listed = runner.invoke(app, ["audits", "-c", path, "--db", url])
    assert listed.exit_code == 0, listed.output
    assert exit_code(["run", audit["name"], "-c", path, "--db", url, "--as-of", AS_OF]) == 0
    engine = make_engine(url)
    with engine.connect() as connection:
        stored = connection.execute(
            select(AuditRun.config, AuditRun.status).order_by(AuditRun.id.desc()).limit(1)
        ).one()
    engine.dispose()
    assert stored.status == "succeeded"
    value = _at(audit, key)
    if key == "source_db":
        value = f"sqlite:///{folder / WAREHOUSE}"
    assert _at(stored.config, key) == value
