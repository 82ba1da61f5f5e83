"""The store's migration revision against the newest migration's, without importing Alembic: the
check every command that reads or writes the store makes first (Alembic's own would import it and
read every migration: benchmarks/results/start_cost.md)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection, inspect, text

VERSIONS = Path(__file__).parent / "migrations" / "versions"


def head_revision() -> str:
    """The newest migration's revision. Each migration file is named by its revision and four
    digits (``0020_monitor_change_gates.py``: ``0020``), one after the other
    (tests/test_migrate.py checks both against Alembic's own history)."""
    return max(path.name.split("_", 1)[0] for path in VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))


def store_revision(connection: Connection) -> str | None:
    """The revision the store's migration record (``alembic_version``) holds; None where there
    is no record, or an empty one."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def is_newer(revision: str | None, head: str) -> bool:
    """Whether ``revision`` is one of biasaudit's (four digits, ``head_revision``) beyond
    ``head``: a newer biasaudit's migration upgraded the store."""
    return revision is not None and len(revision) == 4 and revision.isdigit() and revision > head


def newer_store(where: str, revision: str, head: str) -> str:
    """What a store newer than this program is, and the fix (this biasaudit cannot downgrade it,
    and reading it would misread tables it does not know)."""
    return (
        f"{where} is at revision {revision}, newer than this biasaudit's {head} (a newer biasaudit "
        "upgraded it): upgrade biasaudit (pip install --upgrade biasaudit) to use it"
    )
