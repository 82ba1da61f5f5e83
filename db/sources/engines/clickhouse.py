"""ClickHouse through clickhouse-sqlalchemy's HTTP driver: typed timestamps and scores only, a
zero date for moments it cannot hold, and the push-down grouped on the table itself."""

from __future__ import annotations

from sqlalchemy import Connection, Date, DateTime, Engine, Text, case, func, literal, select
from sqlalchemy import text as sql_text
from sqlalchemy.ext.compiler import compiles

from biasaudit.db.sources.engines.base import (
    SourceEngine,
    connection_of,
    to_double,
)
from biasaudit.db.sources.types import underlying_type


@compiles(to_double, "clickhouse")
def _to_double(element, compiler, **kw):
    # A function keeps NULL where CAST to a non-Nullable type fails on it.
    return f"toFloat64({compiler.process(element.clauses, **kw)})"


class ClickHouse(SourceEngine):
    """ClickHouse; the SQL here parses no text on it (its timestamps and scores are typed)."""

    name, label = "clickhouse", "ClickHouse"
    parses_text = False
    # clickhouse-sqlalchemy's whole-table reflection reads system.tables twice more for the
    # table engine and its keys
    reflects_columns_only = True

    def table_names(self, bind: Engine | Connection, schema: str) -> list[str]:
        # clickhouse-sqlalchemy's listing filters on the URL's database (NULL without one)
        query = sql_text(
            "SELECT name FROM system.tables WHERE database = coalesce(:schema, currentDatabase())"
        )
        with connection_of(bind) as connection:
            return [str(n) for n in connection.execute(query, {"schema": schema or None}).scalars()]

    def date_as_timestamp(self, column):
        return func.toDateTime(column, "UTC")  # a CAST to DateTime fails on a NULL date

    def zero_date(self, column):
        """A Date or DateTime column holds its zero date (shown as 0000-00-00), which ClickHouse
        stores for a moment it cannot hold (before 1970, say 1850): no real moment. (The other
        engines hold 1850 itself; MariaDB's driver returns MariaDB's own zero date as text, which
        the timestamp rule refuses.)"""
        if not isinstance(underlying_type(column), (Date, DateTime)):
            return None
        return func.toUInt32(column) == 0

    def read_timestamp(self, column):
        """The column's text in UTC, and the zero date as ClickHouse shows it, which the
        timestamp rule refuses as no timestamp (the HTTP driver would read it as NULL)."""
        zero = self.zero_date(column)
        if zero is None:
            return column
        is_datetime = isinstance(underlying_type(column), DateTime)
        shown = literal("0000-00-00 00:00:00" if is_datetime else "0000-00-00", Text)
        text = func.toString(column, "UTC") if is_datetime else func.toString(column)
        return case((zero, shown), else_=text)

    def grouped(self, keys: list, names: list[str], ok, per_row: dict, in_window):
        # A derived table over a Distributed table is computed on the server that was asked,
        # every row sent to it; grouping the table itself aggregates on each shard, and countIf
        # counts the rows that pass in less time than a sum of CASE (benchmarks/results/
        # engines.md); a rule that is NULL fails (an aggregate of only NULLs is NULL).
        passed = func.countIf(func.coalesce(ok, literal(0)))
        sums = [func.count().label("n"), (func.count() - passed).label("suspect")]
        sums += [func.sum(e).label(name) for name, e in per_row.items()]
        grouping = [key.element for key in keys]
        return select(*keys, *sums).where(in_window).group_by(*grouping)
