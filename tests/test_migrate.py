"""`db upgrade` beside tables of the user's: the store is recognised by its own tables only."""

from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import inspect, make_url, select, text

from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import list_runs
from biasaudit.db.store.migrate import UpgradeError, alembic_config, upgrade
from biasaudit.db.store.models import Base, MetricResult
from biasaudit.flows.demo import END
from biasaudit.flows.pipeline import run_audit

STORES = pytest.mark.parametrize(
    "source_db_url", ["sqlite", "postgresql", "mariadb"], indirect=True
)


def user_tables(url):
    """Two tables of the user's: predictions under another name, and a log table."""
    engine = make_engine(url)
    pd.DataFrame(
        {
            "case_no": [f"c{i}" for i in range(40)],
            "decided": pd.Timestamp("2026-10-01"),
            "label": [i % 2 for i in range(40)],
            "decision": [(i // 2) % 2 for i in range(40)],
            "region": ["north" if i % 3 else "south" for i in range(40)],
        }
    ).to_sql("decisions", engine, index=False)
    pd.DataFrame({"note": ["kept", "as is"]}).to_sql("audit_log", engine, index=False)
    engine.dispose()


def snapshot(url):
    """Every table and view of the database with the user tables' contents."""
    engine = make_engine(url)
    with engine.connect() as connection:
        inspector = inspect(connection)
        names = sorted(inspector.get_table_names() + inspector.get_view_names())
        rows = {
            table: pd.read_sql(text(f"SELECT * FROM {table}"), connection).to_dict("list")
            for table in ("decisions", "audit_log")
        }
    engine.dispose()
    return names, rows


@STORES
def test_the_store_is_built_beside_tables_of_yours(source_db_url, tmp_path):
    """A database holding only the user's tables becomes a store beside them: the tables stay
    untouched, an audit reads one of them and stores its results next to it."""
    url = source_db_url
    user_tables(url)
    names, rows = snapshot(url)
    upgrade(url)
    upgrade(url)  # idempotent
    after, rows_after = snapshot(url)
    assert rows_after == rows
    assert set(names) == {"decisions", "audit_log"} and set(names) < set(after)
    config = tmp_path / "audits.toml"
    config.write_text(
        """
[[audits]]
name = "decisions"
model = "rules-engine"
source = "decisions"
attributes = ["region"]
metrics = ["tpr", "fpr"]
columns = { prediction_id = "case_no", predicted_at = "decided", y_true = "label", y_pred = "decision" }
"""
    )
    result = run_audit("decisions", str(config), url, END)
    engine = make_engine(url)
    assert list_runs(engine)["status"].tolist() == ["succeeded"]
    with engine.connect() as connection:
        tpr = connection.scalar(
            select(MetricResult.value).where(
                MetricResult.run_id == result["run_id"],
                MetricResult.group_name == "north",
                MetricResult.subset == "group",
                MetricResult.metric == "tpr",
                MetricResult.estimator == "raw",
            )
        )
    engine.dispose()
    north = [i for i in range(40) if i % 3 and i % 2]  # labelled 1 in the north
    assert tpr == pytest.approx(sum((i // 2) % 2 for i in north) / len(north))
    assert snapshot(url)[1] == rows


@pytest.mark.parametrize("source_db_url", ["mariadb"], indirect=True)
def test_a_failed_mariadb_build_leaves_the_database_as_it_was(source_db_url, monkeypatch):
    """MariaDB's DDL commits statement by statement: when building the store fails, what it
    created is dropped again and the user's tables are as they were."""
    import biasaudit.db.store.migrate

    url = source_db_url
    user_tables(url)
    before = snapshot(url)
    broken = [("metric_series", "CREATE VIEW metric_series AS SELECT nothing FROM nowhere")]
    monkeypatch.setattr(biasaudit.db.store.migrate, "views", lambda: broken)
    with pytest.raises(UpgradeError, match="the database holds what it held before"):
        upgrade(url)
    assert snapshot(url) == before


@STORES
def test_a_half_built_store_is_refused_and_left_alone(source_db_url):
    """One of the store's tables without the migration record is refused before anything
    changes, whatever other tables the database holds."""
    url = source_db_url
    user_tables(url)
    engine = make_engine(url)
    Base.metadata.tables["audit_runs"].create(engine)
    engine.dispose()
    before = snapshot(url)
    with pytest.raises(UpgradeError, match=r"biasaudit's tables \['audit_runs'\] but no migration"):
        upgrade(url)
    assert snapshot(url) == before


@STORES
def test_an_empty_migration_record_beside_store_tables_is_half_built(source_db_url):
    """An alembic_version holding no revision beside the store's tables is a half-built store
    too: refused before anything changes (migrating from 0001 failed with 'already exists')."""
    url = source_db_url
    user_tables(url)
    engine = make_engine(url)
    Base.metadata.tables["audit_runs"].create(engine)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
    engine.dispose()
    before = snapshot(url)
    with pytest.raises(UpgradeError, match=r"biasaudit's tables \['audit_runs'\] but no migration"):
        upgrade(url)
    assert snapshot(url) == before


@STORES
def test_another_applications_migration_record_is_refused_and_left_alone(source_db_url):
    """An alembic_version of the user's own application (a revision that is none of ours) is
    refused before anything changes: the store cannot share that record."""
    url = source_db_url
    user_tables(url)
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
        connection.execute(text("INSERT INTO alembic_version VALUES ('ae1027a6acf')"))
    engine.dispose()
    before = snapshot(url)
    with pytest.raises(UpgradeError, match=r"\['ae1027a6acf'\], none of biasaudit's revisions"):
        upgrade(url)
    assert snapshot(url) == before


def test_a_store_newer_than_the_program_says_so_and_names_the_fix(db_url):
    """A store a newer biasaudit upgraded (its revision beyond this program's head) is named
    newer, with the fix (upgrade biasaudit), by every command's check and by `db upgrade`, which
    changes nothing; it said "run `biasaudit db upgrade` first", which cannot help."""
    from typer.testing import CliRunner

    from biasaudit.db.store.revision import head_revision
    from biasaudit.flows.cli import app

    head = head_revision()
    newer = f"{int(head) + 8:04d}"
    engine = make_engine(db_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": newer})
    engine.dispose()
    message = f"at revision {newer}, newer than this biasaudit's {head}"
    for command in (["history"], ["quarantine", "--load"], ["db", "upgrade"]):
        result = CliRunner().invoke(app, [*command, "--db", db_url])
        assert result.exit_code == 1, (command, result.output)
        assert message in result.output and "upgrade biasaudit" in result.output, result.output
        assert "run `biasaudit db upgrade`" not in result.output, result.output
    with pytest.raises(UpgradeError, match=f"{message}.*nothing was changed"):
        upgrade(db_url)
    engine = make_engine(db_url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == newer
    engine.dispose()


def test_a_store_missing_one_of_its_tables_is_refused(db_url):
    """A store whose migration record says head but which lacks a table is named half-built."""
    engine = make_engine(db_url)
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE planning_results"))
    engine.dispose()
    with pytest.raises(UpgradeError, match=r"lacks \['planning_results'\]: a half-built store"):
        upgrade(db_url)


@pytest.mark.parametrize("source_db_url", ["postgresql"], indirect=True)
def test_a_postgresql_url_without_driver_is_upgraded(source_db_url):
    """`db upgrade --db postgresql://...` migrates with psycopg 3, as every engine does (the
    migrations' own engine took psycopg2, which is not installed)."""
    url = make_url(source_db_url).set(drivername="postgresql")
    upgrade(url.render_as_string(hide_password=False))
    engine = make_engine(source_db_url)
    assert "alembic_version" in inspect(engine).get_table_names()
    engine.dispose()


def test_the_head_and_the_store_revision_are_alembics(tmp_path):
    """The revision check without Alembic (db.store.revision) reads what Alembic would: each migration
    file's name starts with its revision, the revisions form one line, and the newest is
    Alembic's head; the store's record is Alembic's current revision, before and after an
    upgrade."""
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from biasaudit.db.store.revision import VERSIONS, head_revision, store_revision

    script = ScriptDirectory.from_config(alembic_config())
    revisions = list(script.walk_revisions())
    assert len(script.get_heads()) == 1 and head_revision() == script.get_current_head()
    for revision in revisions:
        assert Path(revision.path).name.startswith(f"{revision.revision}_"), revision.path
    assert len(list(VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))) == len(revisions)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(url)
    with engine.connect() as connection:
        assert store_revision(connection) is None
        assert MigrationContext.configure(connection).get_current_revision() is None
    upgrade(url, "0019")
    with engine.connect() as connection:
        assert store_revision(connection) == "0019"
        assert MigrationContext.configure(connection).get_current_revision() == "0019"
    engine.dispose()
