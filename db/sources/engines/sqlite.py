"""SQLite: dynamically typed (any value in any column, whatever its declared type), dates as
text, times to the millisecond."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Text, case, cast, func, literal, null, select
from sqlalchemy.ext.compiler import compiles

from biasaudit.db.sources.engines.base import SourceEngine, cast_as_double, floor_of, to_double
from biasaudit.schemas.grammar import DECIMAL_TEXT

compiles(to_double, "sqlite")(cast_as_double)


@compiles(floor_of, "sqlite")
def _floor_of(element, compiler, **kw):
    # SQLite's FLOOR needs its math functions compiled in; CAST AS INTEGER truncates, the same
    # for the x >= 0 it is used on.
    return f"CAST({compiler.process(element.clauses, **kw)} AS INTEGER)"


class SQLite(SourceEngine):
    """SQLite through the standard library's driver."""

    name, label = "sqlite", "SQLite"
    types_bind = False
    # Sub-millisecond margin: SQLite's date functions keep milliseconds only.
    margin = timedelta(milliseconds=2)
    bytewise_collation = "BINARY"

    def iso_moment(self, text):
        return func.strftime("%Y-%m-%d %H:%M:%f", text)  # converts the offset to UTC

    def parsed_timestamp(self, column):
        # whatever the declared type, values may be text
        return self.text_timestamp(cast(column, Text))

    def bound(self, moment: datetime, aware: bool = False):
        naive = moment.astimezone(UTC).replace(tzinfo=None)
        return literal(naive.strftime("%Y-%m-%d %H:%M:%S.%f")[:23], Text)

    def seconds_between(self, later, earlier):
        start = literal(2440587.5) if earlier is None else func.julianday(earlier)
        return (func.julianday(later) - start) * literal(86400.0)

    def parsed_number(self, column):
        if isinstance(column, to_double):
            return column
        text = self.as_text(column)
        number = to_double(func.trim(text))
        is_number = func.typeof(column).in_(["integer", "real"])  # numbers stored as numbers
        return case(
            (is_number, to_double(column)),
            (self.matches(text, DECIMAL_TEXT), number),
            else_=null(),
        )

    def json_key(self, column, key: str):
        if '"' in key or "\\" in key:  # no JSON path can name it
            each = func.json_each(column).table_valued("key", "value")
            return select(each.c.value).where(each.c.key == key).scalar_subquery()
        return super().json_key(column, key)
