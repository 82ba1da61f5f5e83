"""A lost COMMIT reply: the server committed, the client never heard it and retries.

The product reaches PostgreSQL or MariaDB through tests.faultproxy, which lets the COMMIT of the
persist transaction through, swallows the server's answer and cuts the connection: the persist task
fails with OperationalError and its Prefect retry runs again against a database that already holds
the run. The retry must recognise the run as its own (its row is succeeded) instead of deleting it
as an "identical" run or marking it failed with its results still stored.
"""

import pandas as pd
import pytest
from sqlalchemy import func, select

from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import list_runs
from biasaudit.db.store.models import AuditRun, QuarantinedRow
from biasaudit.db.store.runs import record_failed_run, release_run, reuse_identical_run
from biasaudit.flows.audit import audit_flow, run_audit
from biasaudit.flows.config_files import load_audit
from biasaudit.flows.demo import END
from biasaudit.flows.pipeline import new_record
from biasaudit.schemas.quarantine import TooManyInvalidRows

from .conftest import DEMO_CONFIG, on_databases, separate_database
from .faultproxy import FaultProxy
from .test_flow import make_custom_source
from .test_reliability import RESULT_TABLES, load_small

AUDIT = "credit-race"
STORED = (*RESULT_TABLES, QuarantinedRow)  # every table the persist transaction writes per run


def stored_rows(url: str, run_id: int) -> dict[str, list[tuple]]:
    """The rows of ``run_id`` in each table persist writes, without their run id (and the
    quarantine's own id and time), sorted: comparable between two runs of the same input."""
    rows = {}
    with make_engine(url).connect() as connection:
        for model in STORED:
            table = model.__table__
            columns = [c for c in table.c if c.name not in ("run_id", "id", "created_at")]
            found = connection.execute(select(*columns).where(table.c.run_id == run_id))
            rows[table.name] = sorted(map(tuple, found), key=repr)
    return rows


def proxy_to(url: str) -> FaultProxy:
    parsed = make_engine(url).url
    return FaultProxy(parsed.host or "127.0.0.1", parsed.port or 0)


@pytest.mark.usefixtures("prefect_harness")
@on_databases("postgresql", "mariadb")
@pytest.mark.parametrize("force", [False, True])
def test_a_lost_commit_reply_of_persist_keeps_the_run_once(db_url, force):
    """The persist transaction commits, its reply is lost, the persist task retries: the run is
    stored once, succeeded, with all its results (the same rows as a fault-free run of the same
    input), and no failed run holds result rows."""
    load_small(db_url)
    with proxy_to(db_url) as proxy:
        proxy.drop_reply(b"COMMIT", after=b"group_counts")
        result = audit_flow(AUDIT, str(DEMO_CONFIG), proxy.url(db_url), END, force)
        assert proxy.fired.is_set()  # the reply to the persist's COMMIT was really lost
    engine = make_engine(db_url)
    runs = list_runs(engine)
    assert runs[["id", "status", "version"]].values.tolist() == [[result["run_id"], "succeeded", 1]]
    assert result["new"]
    # a fault-free run of the same input stores the reference rows (forced: a version of its own)
    again = run_audit(AUDIT, str(DEMO_CONFIG), db_url, END, force=True)
    expected, stored = stored_rows(db_url, again["run_id"]), stored_rows(db_url, result["run_id"])
    assert all(expected[model.__tablename__] for model in RESULT_TABLES)
    assert stored == expected
    assert list_runs(engine, status="failed").empty


@pytest.mark.usefixtures("prefect_harness")
@on_databases("postgresql", "mariadb")
def test_a_lost_commit_reply_of_the_failure_marking_stores_its_quarantine_once(db_url, tmp_path):
    """A run failing with quarantined rows is marked failed, its COMMIT's reply is lost and the
    failure step retries: the run is failed once with each quarantined row stored once."""
    make_custom_source(db_url, bad_share=0.25)  # 10 of 40 rows have y_pred = 2
    config = tmp_path / "audits.toml"
    config.write_text(
        "[[audits]]\n"
        'name = "decisions"\nmodel = "rules-engine"\nsource = "decisions"\n'
        'attributes = ["region"]\nmetrics = ["tpr"]\n'
        'columns = { prediction_id = "case_no", predicted_at = "decided", y_true = "label", '
        'y_pred = "decision" }\n'
        "thresholds = { max_invalid_fraction = 0.1 }\n"
    )
    with proxy_to(db_url) as proxy:
        proxy.drop_reply(b"COMMIT", after=b"quarantined_rows")
        with pytest.raises(TooManyInvalidRows):
            audit_flow("decisions", str(config), proxy.url(db_url), END)
        assert proxy.fired.is_set()
    (run_id,) = list_runs(make_engine(db_url), status="failed")["id"].tolist()
    with make_engine(db_url).connect() as connection:
        refs = connection.scalars(
            select(QuarantinedRow.row_ref).where(QuarantinedRow.run_id == run_id)
        )
        assert sorted(refs) == sorted(f"c{i}" for i in range(10))  # the rows with y_pred = 2
    assert not any(stored_rows(db_url, run_id)[model.__tablename__] for model in RESULT_TABLES)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def succeeded_run(request, tmp_path_factory):
    """A store of its own holding one run committed as succeeded: its URL, the run's id and its
    stored rows. One audit per store for the three tests below, which each call one step of the
    store on the run and check that it changed nothing (a step that did change it fails there)."""
    with separate_database(request.param, tmp_path_factory.mktemp("lost-commit")) as url:
        load_small(url)
        run_id = run_audit(AUDIT, str(DEMO_CONFIG), url, END)["run_id"]
        yield url, run_id, stored_rows(url, run_id)


def test_marking_a_succeeded_run_failed_changes_nothing(succeeded_run):
    """A failure recorded for a run that has committed (a late failure step after a lost reply)
    leaves it succeeded with its results: a failed run never keeps results."""
    db_url, run_id, before = succeeded_run
    record = new_record(load_audit(DEMO_CONFIG, AUDIT), END)
    engine = make_engine(db_url)
    quarantine = pd.DataFrame(
        {"row_number": [1], "row_ref": ["1"], "column_name": ["score"], "value": ["2"]}
        | {"rule": ["score in [0, 1]"], "row": [{"score": 2}]}
    )
    record_failed_run(engine, run_id, record, "OperationalError: lost", quarantine)
    assert list_runs(engine)[["id", "status"]].values.tolist() == [[run_id, "succeeded"]]
    assert stored_rows(db_url, run_id) == before


def test_a_succeeded_run_is_never_replaced_by_itself(succeeded_run):
    """The identical-run step given a run that has already committed (its own retry) finds no
    other identical run and deletes nothing."""
    db_url, run_id, before = succeeded_run
    record = new_record(load_audit(DEMO_CONFIG, AUDIT), END)
    engine = make_engine(db_url)
    with engine.connect() as connection:
        stored = connection.execute(select(AuditRun).where(AuditRun.id == run_id)).one()
    record.config_hash, record.input_fingerprint = stored.config_hash, stored.input_fingerprint
    try:
        assert reuse_identical_run(engine, run_id, record) is None
    finally:
        release_run(run_id)
    assert list_runs(engine)[["id", "status"]].values.tolist() == [[run_id, "succeeded"]]
    assert stored_rows(db_url, run_id) == before


def test_marking_a_removed_run_failed_stores_nothing(succeeded_run):
    """A failure recorded for a run whose row is gone (removed as a duplicate of an identical run
    whose commit reply was lost) writes nothing: no quarantine rows of a run that does not
    exist (a foreign-key error on PostgreSQL hid the real error; orphans on SQLite)."""
    db_url, run_id, before = succeeded_run
    record = new_record(load_audit(DEMO_CONFIG, AUDIT), END)
    engine = make_engine(db_url)
    quarantine = pd.DataFrame(
        {"row_number": [1], "row_ref": ["1"], "column_name": ["score"], "value": ["2"]}
        | {"rule": ["score in [0, 1]"], "row": [{"score": 2}]}
    )
    assert record_failed_run(engine, run_id + 1, record, "OperationalError: lost", quarantine)
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(QuarantinedRow)) == 0
    assert list_runs(engine)[["id", "status"]].values.tolist() == [[run_id, "succeeded"]]
    assert stored_rows(db_url, run_id) == before
