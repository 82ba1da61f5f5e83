"""DuckDB: the standard's casts, its own catalogue (duckdb-engine's reflection goes through
PostgreSQL catalogue tables DuckDB does not have) and its own Arrow reader."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    Date,
    DateTime,
    Double,
    Engine,
    Integer,
    MetaData,
    Numeric,
    String,
    Table,
    Uuid,
    text,
)
from sqlalchemy.exc import NoSuchTableError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.types import NullType

from biasaudit.db.sources.engines.base import (
    SourceEngine,
    cast_as_double,
    compiled,
    connection_of,
    epoch_seconds,
    iso_cast_in_utc,
    to_double,
)

TYPES = {
    "BOOLEAN": Boolean,
    "TINYINT": Integer,
    "SMALLINT": Integer,
    "INTEGER": Integer,
    "BIGINT": BigInteger,
    "HUGEINT": BigInteger,
    "UTINYINT": Integer,
    "USMALLINT": Integer,
    "UINTEGER": BigInteger,
    "UBIGINT": BigInteger,
    "FLOAT": Double,
    "DOUBLE": Double,
    "DATE": Date,
    "TIMESTAMP": DateTime,
    "VARCHAR": String,
    "UUID": Uuid,
    "JSON": JSON,
}

compiles(to_double, "duckdb")(cast_as_double)


def _type(data_type: str):
    if data_type.startswith("DECIMAL"):
        return Numeric()
    if data_type in {"TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ"}:
        return DateTime(timezone=True)
    known = TYPES.get(data_type.split("(")[0])
    return known() if known else NullType()


class DuckDB(SourceEngine):
    """DuckDB through duckdb-engine."""

    name, label = "duckdb", "DuckDB"
    position = "strpos"

    def reflect(self, bind: Engine | Connection, schema: str, name: str) -> Table:
        query = text(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
            "WHERE table_name = :name AND table_schema = coalesce(:schema, current_schema()) "
            "ORDER BY ordinal_position"
        )
        with bind.engine.connect() as connection:
            found = connection.execute(query, {"name": name, "schema": schema or None}).all()
        if not found:
            raise NoSuchTableError(name)
        columns = [
            Column(column, _type(data_type), nullable=nullable != "NO")
            for column, data_type, nullable in found
        ]
        return Table(name, MetaData(), *columns, schema=schema or None)

    def table_names(self, bind: Engine | Connection, schema: str) -> list[str]:
        query = text(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = coalesce(:schema, current_schema())"
        )
        with connection_of(bind) as connection:
            return [str(n) for n in connection.execute(query, {"schema": schema or None}).scalars()]

    def unique_keys(self, connection: Connection, table: Table) -> list[list[str]]:
        query = text(
            "SELECT constraint_column_names FROM duckdb_constraints() WHERE table_name = :name "
            "AND schema_name = coalesce(:schema, current_schema()) "
            "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
        )
        found = connection.execute(query, {"name": table.name, "schema": table.schema})
        return [list(names) for (names,) in found]

    def iso_moment(self, text):
        return iso_cast_in_utc(self, text)

    def seconds_between(self, later, earlier):
        return epoch_seconds(later, earlier)

    def arrow_batches(self, connection: Connection, query, chunk_rows: int):
        # bound parameters; local, no server to go silent
        statement = compiled(connection, query)
        params = [statement.params[name] for name in statement.positiontup or []]
        duck: Any = connection.connection.driver_connection
        return iter(duck.sql(str(statement), params=params).to_arrow_reader(chunk_rows)), None
