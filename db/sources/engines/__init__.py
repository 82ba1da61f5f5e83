"""One module per source engine behind one protocol (db.sources.engines.base.SourceEngine).

Adding an engine is one module here and its tests (docs/recipes.md, "Add an engine").
"""

from __future__ import annotations

from biasaudit.db.sources.engines.base import SourceEngine
from biasaudit.db.sources.engines.clickhouse import ClickHouse
from biasaudit.db.sources.engines.duckdb import DuckDB
from biasaudit.db.sources.engines.generic import Generic
from biasaudit.db.sources.engines.mysql import MySQL
from biasaudit.db.sources.engines.postgresql import PostgreSQL
from biasaudit.db.sources.engines.spark import Spark
from biasaudit.db.sources.engines.sqlite import SQLite

# Each engine by SQLAlchemy's dialect name.
ENGINES: dict[str, SourceEngine] = {
    engine.name: engine
    for engine in (SQLite(), PostgreSQL(), MySQL(), DuckDB(), ClickHouse(), Spark())
}
ENGINES["mariadb"] = ENGINES["mysql"]


def engine_for(dialect: str) -> SourceEngine:
    """Return the module of the engine SQLAlchemy names ``dialect`` (the generic one if none)."""
    return ENGINES.get(dialect) or Generic(dialect)


__all__ = ["ENGINES", "SourceEngine", "engine_for"]
