"""Build or upgrade a database with the Alembic migrations in ``db/store/migrations``.

A store usually lives beside the predictions, in a database that holds tables of its own: a
store is recognised by its own objects only (the models' tables, the history views and the
migration record, alembic_version), and other tables are never touched. Some of those objects
without a migration record is a half-built store (or tables of the user's under our names): it is
refused, on every database, before anything is changed; so is a migration record naming
revisions that are not ours (another application's Alembic keeps its record in the same table).
After an upgrade to head every object of the store must be there.

MariaDB/MySQL run DDL outside transactions (each statement commits), so a failed migration there
leaves half a schema. And the early migrations create keys longer than MariaDB allows. A
MariaDB/MySQL database without a store is therefore built in one step from the models at head
(whose key columns have MariaDB variants: db.store.models.KeyText), with the history views, and
stamped at head; if any statement fails, everything created is dropped again, so the database holds
what it held before, never half a store. Later migrations then run one by one as elsewhere.
"""

from __future__ import annotations

import functools
import importlib.util
import types
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from biasaudit.db.engine import database_url, make_engine, parse_url
from biasaudit.db.store.revision import is_newer, newer_store

MIGRATIONS = Path(__file__).parent / "migrations"
NON_TRANSACTIONAL = {"mysql", "mariadb"}


class UpgradeError(RuntimeError):
    """The database could not be upgraded; the message says what state it was left in."""


def alembic_config(url: str | None = None) -> Config:
    """An Alembic configuration that needs no ``alembic.ini`` (works from an installed package)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # parsed as every engine's URL is (a postgresql:// URL gets psycopg 3, not psycopg2)
    parsed = parse_url(database_url(url)).render_as_string(hide_password=False)
    config.set_main_option("sqlalchemy.url", parsed.replace("%", "%%"))
    return config


# Each history view: the migration that made it and the statement's name there.
VIEWS = {
    "latest_succeeded_runs": ("0007", "LATEST"),
    "metric_series": ("0007", "SERIES"),
    "disparity_series": ("0022", "DISPARITIES"),
}


def views() -> list[tuple[str, str]]:
    """(name, CREATE VIEW statement) of the history views, from the migrations that made them
    (a later migration that alters a column they read drops and re-creates them)."""
    return [(name, getattr(_migration(rev), statement)) for name, (rev, statement) in VIEWS.items()]


@functools.cache
def _migration(revision: str) -> types.ModuleType:
    """The migration module of ``revision``, loaded from its file once."""
    path = next((MIGRATIONS / "versions").glob(f"{revision}_*.py"))
    spec = importlib.util.spec_from_file_location(f"biasaudit_migration_{revision}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def store_objects() -> set[str]:
    """The tables and views of a store besides its migration record: what the models define."""
    from biasaudit.db.store.models import Base

    return set(Base.metadata.tables) | {name for name, _ in views()}


def _objects(url: str) -> tuple[str, set[str], set[str]]:
    """The database's dialect, the names of its tables and views, and the revisions its
    alembic_version records."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            inspector = inspect(connection)
            names = set(inspector.get_table_names()) | set(inspector.get_view_names())
            recorded = set(
                connection.execute(text("SELECT version_num FROM alembic_version")).scalars()
                if "alembic_version" in names
                else ()
            )
        return engine.dialect.name, names, recorded
    finally:
        engine.dispose()


def _build_fresh(url: str, config: Config) -> None:
    """Create the head schema from the models on a non-transactional database that holds none of
    it (other tables stay as they are), or create nothing."""
    from biasaudit.db.store.models import Base

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
                    "it created was dropped again, the database holds what it held before"
                ) from exc
    finally:
        engine.dispose()
    command.stamp(config, "head")


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Apply every migration up to ``revision`` (idempotent); safe on MariaDB/MySQL too. Tables
    that are not the store's are left alone; a half-built store is refused (UpgradeError)."""
    config = alembic_config(url)
    url = database_url(url)
    dialect, present, recorded = _objects(url)
    script = ScriptDirectory.from_config(config)
    head = script.get_current_head()
    foreign = sorted(recorded - {revision.revision for revision in script.walk_revisions()})
    newer = [r for r in foreign if is_newer(r, str(head))]
    if newer:
        raise UpgradeError(newer_store("the store", newer[-1], str(head)) + "; nothing was changed")
    if foreign:
        raise UpgradeError(
            f"the migration record alembic_version holds {foreign}, none of biasaudit's "
            f"revisions (0001 to {head}): another application's migrations keep their record "
            "there; nothing was changed: keep the store in another database"
        )
    if not recorded:  # no migration record, or an empty one
        ours = sorted(present & store_objects())
        if ours:
            raise UpgradeError(
                f"the database holds biasaudit's tables {ours} but no migration record "
                "(alembic_version): a half-built store, or tables of yours under these names; "
                "nothing was changed: drop them, or use another database"
            )
        if dialect in NON_TRANSACTIONAL:
            if revision != "head":
                raise UpgradeError("a fresh MariaDB/MySQL store is built at head only")
            _build_fresh(url, config)
            return
    if dialect not in NON_TRANSACTIONAL:
        command.upgrade(config, revision)
    else:
        try:
            command.upgrade(config, revision)  # each migration's version is recorded as it commits
        except Exception as exc:
            raise UpgradeError(
                f"a migration towards {revision} ({head}) failed on {dialect}: DDL there is not "
                "transactional, so the failing migration may be partly applied; the migration "
                f"record (alembic_version) names the last complete one. Cause: {exc}"
            ) from exc
    missing = sorted(store_objects() - _objects(url)[1]) if revision in ("head", head) else []
    if missing:
        raise UpgradeError(
            f"the store is migrated to {head} but lacks {missing}: a half-built store "
            "(dropped by hand?); restore them from a backup, or use another database"
        )
