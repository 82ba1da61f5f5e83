"""MariaDB and MySQL: text compared without case and trailing spaces by default (here through a
binary collation), DATETIME without a zone, regular expressions on bytes."""

from __future__ import annotations

from sqlalchemy import (
    Integer,
    LargeBinary,
    String,
    and_,
    case,
    cast,
    collate,
    func,
    literal,
    literal_column,
    type_coerce,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.types import NullType

from biasaudit.db.sources.engines.base import SourceEngine, cast_as_double, to_double
from biasaudit.db.sources.types import underlying_type
from biasaudit.schemas.grammar import ISO_OFFSET

# The audit groups and compares the exact strings (as pandas does), so text goes through this.
EXACT = "utf8mb4_nopad_bin"
DATETIME = mysql.DATETIME(fsp=6)

compiles(to_double, "mysql")(cast_as_double)
compiles(to_double, "mariadb")(cast_as_double)


class MySQL(SourceEngine):
    """MariaDB and MySQL through PyMySQL."""

    name, label = "mysql", "MariaDB/MySQL"
    zones = False
    bytewise_collation = EXACT

    def exact(self, text):
        return type_coerce(cast(text, LargeBinary), String)

    def iso_moment(self, text):
        naive = cast(func.replace(func.regexp_replace(text, ISO_OFFSET, ""), "T", " "), DATETIME)
        sign = case((func.substr(text, -6, 1) == "-", -1), else_=1)
        minutes = sign * (
            cast(func.substr(text, -5, 2), Integer) * 60 + cast(func.substr(text, -2, 2), Integer)
        )
        numeric = and_(self.matches(text, ISO_OFFSET), func.right(text, 1) != "Z")
        return case(
            (numeric, func.timestampadd(literal_column("MINUTE"), -minutes, naive)), else_=naive
        )

    def date_as_timestamp(self, column):
        return cast(column, DATETIME)

    def seconds_between(self, later, earlier):
        start = literal("1970-01-01 00:00:00") if earlier is None else earlier
        micro = func.timestampdiff(literal_column("MICROSECOND"), start, later)
        return to_double(micro) / literal(1e6)

    def json_key(self, column, key: str):
        escaped = key.replace("\\", "\\\\").replace('"', '\\"')
        return func.json_unquote(func.json_extract(column, literal(f'$."{escaped}"')))

    def key(self, expression):
        if isinstance(underlying_type(expression), (String, NullType)):
            return collate(expression, EXACT)
        return expression
