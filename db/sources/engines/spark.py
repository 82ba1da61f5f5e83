"""Spark SQL (and Hive) through PyHive's Thrift dialect: typed timestamps and scores only."""

from __future__ import annotations

from sqlalchemy import Connection, Engine, text
from sqlalchemy.ext.compiler import compiles

from biasaudit.db.sources.engines.base import (
    SourceEngine,
    cast_as_double,
    connection_of,
    to_double,
)

compiles(to_double, "hive")(cast_as_double)


class Spark(SourceEngine):
    """Spark SQL's Thrift server; the SQL here parses no text on it."""

    name, label = "hive", "Spark SQL / Hive"
    parses_text = False
    # PyHive's whole-table reflection sends a second DESCRIBE for the partition columns
    reflects_columns_only = True

    def table_names(self, bind: Engine | Connection, schema: str) -> list[str]:
        """The ``tableName`` column of ``SHOW TABLES`` (PyHive lists its first: the database)."""
        quoted = bind.dialect.identifier_preparer.quote_identifier
        query = text("SHOW TABLES" + (f" IN {quoted(schema)}" if schema else ""))
        with connection_of(bind) as connection:
            rows = connection.execute(query).mappings().all()
        return [
            str(row["tableName"] if "tableName" in row else next(iter(row.values())))
            for row in rows
        ]
