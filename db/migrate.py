"""Build or upgrade a database with the Alembic migrations in ``db/migrations``."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from biasaudit.db.engine import database_url

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str | None = None) -> Config:
    """An Alembic configuration that needs no ``alembic.ini`` (works from an installed package)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", database_url(url).replace("%", "%%"))
    return config


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Apply every migration up to ``revision`` (idempotent)."""
    command.upgrade(alembic_config(url), revision)
