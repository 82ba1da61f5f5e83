"""Build or upgrade a database with the Alembic migrations in ``db/migrations``.

MariaDB/MySQL run DDL outside transactions (each statement commits), so a failed migration there
leaves half a schema. And the early migrations create keys longer than MariaDB allows. A fresh
MariaDB/MySQL database is therefore built in one step from the models at head (whose key columns
have MariaDB variants: db.models.KeyText), with the history views, and stamped at head; if any
statement fails, everything created is dropped again, so the database is left empty, never half
built. Later migrations then run one by one as elsewhere.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from biasaudit.db.engine import database_url, make_engine

MIGRATIONS = Path(__file__).parent / "migrations"
NON_TRANSACTIONAL = {"mysql", "mariadb"}


class UpgradeError(RuntimeError):
    """The database could not be upgraded; the message says what state it was left in."""


def alembic_config(url: str | None = None) -> Config:
    """An Alembic configuration that needs no ``alembic.ini`` (works from an installed package)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", database_url(url).replace("%", "%%"))
    return config


def views() -> list[tuple[str, str]]:
    """(name, CREATE VIEW statement) of the history views, from the migration that made them
    (a later migration that alters a column they read drops and re-creates them)."""
    path = next((MIGRATIONS / "versions").glob("0007_*.py"))
    spec = importlib.util.spec_from_file_location("biasaudit_views_0007", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [("latest_succeeded_runs", module.LATEST), ("metric_series", module.SERIES)]


def _build_fresh(url: str, config: Config) -> None:
    """Create the head schema from the models on an empty non-transactional database, or leave
    it empty."""
    from biasaudit.db.models import Base

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            try:
                Base.metadata.create_all(connection)
                for _, statement in views():
                    connection.execute(text(statement))
                connection.commit()
            except Exception as exc:
                for name, _ in reversed(views()):
                    connection.execute(text(f"DROP VIEW IF EXISTS {name}"))
                Base.metadata.drop_all(connection, checkfirst=True)
                connection.commit()
                raise UpgradeError(
                    f"building the schema on {engine.dialect.name} failed ({exc}); everything "
                    "created was dropped again, the database is empty"
                ) from exc
    finally:
        engine.dispose()
    command.stamp(config, "head")


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Apply every migration up to ``revision`` (idempotent); safe on MariaDB/MySQL too."""
    config = alembic_config(url)
    url = database_url(url)
    engine = make_engine(url)
    try:
        dialect = engine.dialect.name
        with engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
    finally:
        engine.dispose()
    if dialect not in NON_TRANSACTIONAL:
        command.upgrade(config, revision)
        return
    if "alembic_version" not in tables:
        if tables - {"alembic_version"}:
            raise UpgradeError(
                f"the database holds tables {sorted(tables)} but no migration record: "
                "not a biasaudit store (or a half-built one); use an empty database"
            )
        if revision != "head":
            raise UpgradeError("a fresh MariaDB/MySQL store is built at head only")
        _build_fresh(url, config)
        return
    head = ScriptDirectory.from_config(config).get_current_head()
    try:
        command.upgrade(config, revision)  # each migration's version is recorded as it commits
    except Exception as exc:
        raise UpgradeError(
            f"a migration towards {revision} ({head}) failed on {dialect}: DDL there is not "
            "transactional, so the failing migration may be partly applied; the migration record "
            f"(alembic_version) names the last complete one. Cause: {exc}"
        ) from exc
