"""The audit's source: read one audit's window of predictions from its table or view.

Table and column names from configuration are looked up in the database's own catalogue (reflection)
and used as SQLAlchemy objects, never pasted into SQL; values are bound parameters.

Values are read as the database driver returns them (no pandas type guessing: an integer column
with NULLs stays integers, text ``007`` stays text); the Pandera rules (schemas.frames) judge them.
Before any row is read, the table is checked against the audit from the catalogue alone
(``table_problems``, also run by ``biasaudit audits``): every column the audit needs exists, and
none is of a type whose values would all fail their rule; each problem is one line.
The SQL here does three things on every dialect (PostgreSQL, SQLite, MariaDB/MySQL, DuckDB):

- decides the window on the *parsed* timestamp (``parsed_timestamp``: typed columns as UTC, text in
  the ISO_TIMESTAMP grammar with its offset honoured); rows whose timestamp is NULL, unparseable,
  before 1900 or in the future (after the audit's clock plus the skew) belong to every window, so
  they are read and quarantined, never silently left out.
  A source without a timestamp column (allowed for window "all" without monitoring) has rows
  without a time, all in the window;
- gives ``row_ok``: a condition true only for rows the Pandera rules accept on the per-row rules
  (id, timestamp, scores), so the push-down may count them unchecked; every other row is fetched
  and judged by Pandera itself;
- reads JSON attribute keys as keys, never as paths.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
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
    Enum,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
    Uuid,
    and_,
    case,
    cast,
    collate,
    func,
    inspect,
    literal,
    literal_column,
    not_,
    null,
    or_,
    select,
    text,
    true,
    type_coerce,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import make_url
from sqlalchemy.exc import NoSuchTableError, SQLAlchemyError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import NullType, TypeDecorator, TypeEngine

from biasaudit.schemas.config import CANONICAL_COLUMNS, Audit
from biasaudit.schemas.grammar import (
    CLOCK_SKEW,
    DECIMAL_TEXT,
    EARLIEST,
    ISO_OFFSET,
    ISO_TIMESTAMP,
)

# Canonical columns every source has (y_pred unless a decision is derived from a score);
# predicted_at where the audit's window or monitor needs it (Audit.timestamp_needed_by).
REQUIRED = ("prediction_id", "y_true", "y_pred")
ATTRIBUTES_JSON = "attributes"
# Sub-millisecond margin: SQLite's date functions keep milliseconds only.
MARGIN = timedelta(milliseconds=2)
AFTER_EPOCH = datetime(1970, 1, 2, tzinfo=UTC)  # later than every zero date (db.source.zero_date)
# MariaDB/MySQL compare text without case and trailing spaces by default; the audit groups and
# compares the exact strings (as pandas does), so their text goes through this collation.
MYSQL_EXACT = "utf8mb4_nopad_bin"
# The kinds of column each canonical column (and every attribute) is read from (README, "Sources:
# any table or view"); in a column of another kind every value fails its rule.
READABLE = {
    "prediction_id": ("text", "number", "uuid"),
    "predicted_at": ("text", "timestamp"),
    "labelled_at": ("text", "timestamp"),
    "y_true": ("text", "number", "boolean"),
    "y_pred": ("text", "number", "boolean"),
    "score": ("text", "number"),
    "decision_score": ("text", "number"),
    "attribute": ("text", "number", "boolean"),
}
# Engines for which the SQL here parses no text (the regular expressions and text casts are
# written for the four databases above): their timestamps and scores come from typed columns.
TYPED_ONLY = {"clickhouse": "ClickHouse", "hive": "Spark SQL / Hive"}
TYPED = {
    "predicted_at": ("timestamp",),
    "labelled_at": ("timestamp",),
    "score": ("number",),
    "decision_score": ("number",),
}
# Names a problem lists of what the database or table has, at most.
LISTED = 30


class SourceError(LookupError):
    """The configured source table or a column the audit needs does not exist, or a column's type
    cannot hold what it should."""


class EmptyWindow(LookupError):
    """The audit window holds no predictions for the model (or the model has none at all)."""


class to_double(FunctionElement):
    """CAST(x AS DOUBLE) on every dialect (SQLAlchemy skips a Double cast on MariaDB)."""

    type = Double()
    inherit_cache = True


@compiles(to_double)
def _to_double(element, compiler, **kw):
    return f"CAST({compiler.process(element.clauses, **kw)} AS DOUBLE PRECISION)"


@compiles(to_double, "mysql")
@compiles(to_double, "mariadb")
@compiles(to_double, "sqlite")
@compiles(to_double, "duckdb")
@compiles(to_double, "hive")
def _to_double_short(element, compiler, **kw):
    return f"CAST({compiler.process(element.clauses, **kw)} AS DOUBLE)"


@compiles(to_double, "clickhouse")
def _to_double_clickhouse(element, compiler, **kw):
    # A function keeps NULL where CAST to a non-Nullable type fails on it.
    return f"toFloat64({compiler.process(element.clauses, **kw)})"


class floor_of(FunctionElement):
    """FLOOR(x) as a whole number; on SQLite, whose FLOOR needs its math functions compiled in,
    CAST(x AS INTEGER), which truncates: the same for the x >= 0 it is used on (db.scan)."""

    inherit_cache = True


@compiles(floor_of)
def _floor_of(element, compiler, **kw):
    return f"FLOOR({compiler.process(element.clauses, **kw)})"


@compiles(floor_of, "sqlite")
def _floor_of_sqlite(element, compiler, **kw):
    return f"CAST({compiler.process(element.clauses, **kw)} AS INTEGER)"


def source_url(audit: Audit, store_url: str) -> str:
    """The URL of the database holding the audit's source: ``audit.source_db`` (its password
    from the environment variable ``audit.source_db_password_env``, if set), else the store's."""
    if audit.source_db is None:
        return store_url
    url = make_url(audit.source_db)
    password = os.environ.get(audit.source_db_password_env)
    if password is not None:
        url = url.set(password=password)
    return url.render_as_string(hide_password=False)


def window_bounds(
    audit: Audit,
    as_of: datetime,
    zone: tzinfo | None = None,
    nominal: Callable[[datetime], datetime] | None = None,
) -> tuple[datetime | None, datetime]:
    """(start, end] of the audit window ending at ``as_of`` (UTC); start is None for all time.

    A window of N days is N calendar days on the wall clock of ``zone`` (default UTC, where a day
    is 24 hours; in a zone with daylight saving, a day is 23 or 25 hours across its changes).
    ``nominal``, a schedule's "latest nominal instant at or before" (flows.schedule), moves the
    end back to the nominal instant of the run and the start to the nominal instant at or before
    N calendar days earlier: consecutive scheduled windows then tile time, whatever the clock
    when each run started."""
    end = as_of.astimezone(UTC) if as_of.tzinfo else as_of.replace(tzinfo=UTC)
    if nominal is not None:
        end = nominal(end)
    days = audit.window_days
    if days is None:
        return None, end
    wall = end.astimezone(zone or UTC).replace(tzinfo=None) - timedelta(days=days)
    # A wall-clock time that occurs twice is its first occurrence; one in a spring-forward gap is
    # as far past the gap's start as it is past the wall-clock time before the gap (fold 0).
    start = wall.replace(tzinfo=zone or UTC).astimezone(UTC)
    return (start if nominal is None else nominal(start)), end


DUCKDB_TYPES = {
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


def _reflect_duckdb(engine: Engine, schema: str, name: str) -> Table:
    """A DuckDB table or view from its information schema (duckdb-engine's reflection goes
    through PostgreSQL catalogue tables DuckDB does not have)."""
    query = text(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_name = :name AND table_schema = coalesce(:schema, current_schema()) "
        "ORDER BY ordinal_position"
    )
    with engine.connect() as connection:
        found = connection.execute(query, {"name": name, "schema": schema or None}).all()
    if not found:
        raise SourceError(_no_table(engine, schema, name))

    def kind(data_type: str):
        if data_type.startswith("DECIMAL"):
            return Numeric()
        if data_type in {"TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ"}:
            return DateTime(timezone=True)
        known = DUCKDB_TYPES.get(data_type.split("(")[0])
        return known() if known else NullType()

    columns = [
        Column(column, kind(data_type), nullable=nullable != "NO")
        for column, data_type, nullable in found
    ]
    return Table(name, MetaData(), *columns, schema=schema or None)


def duckdb_unique_keys(connection, table: Table) -> list[list[str]]:
    """The column lists of a DuckDB table's primary key and unique constraints."""
    query = text(
        "SELECT constraint_column_names FROM duckdb_constraints() WHERE table_name = :name "
        "AND schema_name = coalesce(:schema, current_schema()) "
        "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
    )
    found = connection.execute(query, {"name": table.name, "schema": table.schema})
    return [list(names) for (names,) in found]


def _listing(names: list[str]) -> str:
    """Names for a message: the first LISTED of them, and how many more."""
    if not names:
        return "nothing"
    more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
    return ", ".join(names[:LISTED]) + more


def _no_table(engine: Engine, schema: str, name: str) -> str:
    """Why the source cannot be found, with the tables and views its schema does have."""
    try:
        names = _table_names(engine, schema)
    except SQLAlchemyError:  # no such schema (MariaDB: database) either
        names = []
    where = f"schema {schema!r}" if schema else "the database"
    return (
        f"source {'.'.join(filter(None, [schema, name]))!r}: no such table or view in {where}; "
        f"it has: {_listing(sorted(names))}"
    )


# Where the dialect's listing does not serve: duckdb-engine's, and clickhouse-sqlalchemy's, which
# filters on the URL's database (NULL without one, and no row then).
_CATALOGUES = {
    "duckdb": "SELECT table_name FROM information_schema.tables "
    "WHERE table_schema = coalesce(:schema, current_schema())",
    "clickhouse": "SELECT name FROM system.tables WHERE database = coalesce(:schema, currentDatabase())",
}


def _table_names(bind: Engine | Connection, schema: str) -> list[str]:
    """The tables and views of ``schema`` (the connection's own where empty), through ``bind``:
    DuckDB's and ClickHouse's from their catalogues, Spark SQL's from the ``tableName`` column of
    ``SHOW TABLES`` (PyHive lists its first column: the database), the others' as SQLAlchemy
    reflects them."""
    dialect = bind.dialect
    if dialect.name == "hive":
        quoted = dialect.identifier_preparer.quote_identifier
        query, values = text("SHOW TABLES" + (f" IN {quoted(schema)}" if schema else "")), {}
    elif dialect.name in _CATALOGUES:
        query, values = text(_CATALOGUES[dialect.name]), {"schema": schema or None}
    else:
        inspector = inspect(bind)
        return inspector.get_table_names(schema or None) + inspector.get_view_names(schema or None)
    with nullcontext(bind) if isinstance(bind, Connection) else bind.connect() as connection:
        rows = connection.execute(query, values).mappings().all()
    return [
        str(row["tableName"] if "tableName" in row else next(iter(row.values()))) for row in rows
    ]


def _unlisted(bind: Engine | Connection, schema: str, name: str) -> bool:
    """Whether the schema's tables and views, listed, lack ``name``; False where they cannot be
    listed (a dropped connection): the error that led here is then the one to report."""
    try:
        return name not in _table_names(bind, schema)
    except Exception:  # noqa: BLE001 - whatever a dialect raises, the first error is reported
        return False


def _reflect_columns(bind: Engine | Connection, schema: str, name: str) -> Table:
    """A table's columns from the dialect's column reflection alone: one ``DESCRIBE`` on Spark SQL
    / Hive and ClickHouse, whose whole-table reflection sends more statements for what a scan
    does not use (PyHive a second ``DESCRIBE`` for the partition columns; clickhouse-sqlalchemy
    two reads of ``system.tables`` for the table engine and its keys)."""
    try:
        found = inspect(bind).get_columns(name, schema or None)
    except Exception:  # both dialects pass on the server's own error for a missing table
        if _unlisted(bind, schema, name):
            raise NoSuchTableError(name) from None
        raise
    columns = [Column(c["name"], c["type"], nullable=c.get("nullable", True)) for c in found]
    return Table(name, MetaData(), *columns, schema=schema or None)


def reflect_source(bind: Engine | Connection, source: str) -> Table:
    """The source table or view as the database describes it (``schema.table`` allowed), read
    through ``bind``: given the scan's connection, no other connection is checked out (each
    checkout is a round trip to test it, a slow one on Spark's Thrift server)."""
    schema, _, name = source.rpartition(".")
    engine = bind.engine
    if engine.dialect.name == "duckdb":
        return _reflect_duckdb(engine, schema, name)
    try:
        if engine.dialect.name in ("hive", "clickhouse"):
            return _reflect_columns(bind, schema, name)
        return Table(name, MetaData(), autoload_with=bind, schema=schema or None)
    except NoSuchTableError:
        raise SourceError(_no_table(engine, schema, name)) from None


def _dialect(bind) -> str:
    name = bind.dialect.name
    return "mysql" if name in {"mysql", "mariadb"} else name


def underlying_type(column) -> TypeEngine:
    """The type a column's values have, through the wrappers dialects put around it: a
    TypeDecorator (PyHive reflects Hive's timestamp as one over TIMESTAMP) and ClickHouse's
    Nullable(...) and LowCardinality(...) (their ``nested_type``)."""
    kind = column.type
    while True:
        if isinstance(kind, TypeDecorator):
            kind = kind.impl_instance
        elif isinstance(getattr(kind, "nested_type", None), TypeEngine):
            kind = kind.nested_type
        else:
            return kind


def _is_uuid(kind: TypeEngine) -> bool:
    """SQLAlchemy's Uuid, or a dialect's UUID type of its own (clickhouse-sqlalchemy's derives
    from String, yet ClickHouse compares it with no text)."""
    return isinstance(kind, Uuid) or getattr(kind, "__visit_name__", None) == "uuid"


def _is_text(column) -> bool:
    kind = underlying_type(column)
    return isinstance(kind, (String, NullType)) and not _is_uuid(kind)  # Enum is a String


def _kind(column) -> str:
    """What a column's declared type holds: text (or a type unknown to SQLAlchemy), number,
    boolean, timestamp (or date), uuid, or other."""
    kind = underlying_type(column)
    if isinstance(kind, Boolean):
        return "boolean"
    if _is_text(column):
        return "text"
    if isinstance(kind, (Integer, Numeric, Float)):
        return "number"
    if isinstance(kind, (DateTime, Date)):
        return "timestamp"
    return "uuid" if _is_uuid(kind) else "other"


def _source_names(audit: Audit) -> dict[str, str]:
    """The source column name of each canonical column the audit reads, of each attribute and
    (as ``decision_score``) of the decision's score."""
    wanted = [c for c in CANONICAL_COLUMNS if not (c == "y_pred" and audit.decision)]
    names = {c: audit.source_column(c) for c in wanted + audit.attributes}
    if audit.decision:
        names["decision_score"] = audit.decision.score
    return names


def source_columns(table: Table, audit: Audit) -> dict[str, Column | None]:
    """The table's column for each of ``_source_names``; None where the table has none."""
    return {c: table.c.get(name) for c, name in _source_names(audit).items()}


def _needed(audit: Audit) -> dict[str, str]:
    """The columns a source must have, each with why (for a message)."""
    needed = {c: c for c in REQUIRED if not (c == "y_pred" and audit.decision)}
    if audit.decision:
        needed["decision_score"] = "decision.score"
    if audit.timestamp_needed_by:
        needed["predicted_at"] = f"predicted_at, needed by {audit.timestamp_needed_by}"
    if audit.model_version is not None:
        needed["model_version"] = f"model_version, configured as {audit.model_version!r}"
    for canonical in audit.columns:  # an explicit mapping must exist
        needed.setdefault(canonical, canonical)
    return needed


def table_problems(table: Table, audit: Audit, dialect: str) -> list[str]:
    """Why ``table`` cannot be the audit's source, one line each (empty: it can): a column the
    audit needs is missing, or of a type whose values would all fail their rule (not judged on
    SQLite, whose declared types do not bind its values)."""
    needed, has = _needed(audit), _listing(list(table.c.keys()))
    problems = []
    for canonical, name in _source_names(audit).items():
        column = table.c.get(name)
        is_attribute = canonical in audit.attributes
        if column is None:
            why = needed.get(canonical)
            if is_attribute and ATTRIBUTES_JSON not in table.c:
                why = f"attribute {canonical!r}, and no {ATTRIBUTES_JSON!r} JSON column either"
            if why is not None:
                problems.append(
                    f"source {audit.source!r}: no column {name!r} ({why}); it has: {has}"
                )
            continue
        typed = TYPED.get(canonical) if dialect in TYPED_ONLY and not is_attribute else None
        readable = typed or READABLE.get("attribute" if is_attribute else canonical)
        if readable and dialect != "sqlite" and _kind(column) not in readable:
            what = f"attribute {canonical!r}" if is_attribute else canonical
            kinds = f"{', '.join(readable[:-1])} or {readable[-1]}" if readable[1:] else readable[0]
            problems.append(
                f"source {audit.source!r}: column {name!r} ({what}) is of type "
                f"{type(underlying_type(column)).__name__}; {what} is read from a {kinds} column"
                + (f" on {TYPED_ONLY[dialect]}" if typed else "")
            )
    return problems


def source_problems(engine: Engine, audit: Audit) -> list[str]:
    """Why the audit's source cannot be read, one line each (empty: it can), from the database's
    catalogue alone: no row is read."""
    try:
        table = reflect_source(engine, audit.source)
    except SourceError as exc:
        return [str(exc)]
    return table_problems(table, audit, _dialect(engine))


def _as_text(column, dialect: str):
    """The column as text (SQLite: always cast, its values need not have the declared type)."""
    kind = underlying_type(column)
    if dialect != "sqlite" and isinstance(kind, String) and not isinstance(kind, Enum):
        return column
    return cast(column, Text)


def _regex(text, pattern: str, dialect: str):
    """``text`` matches ``pattern``, case-sensitively, on every dialect; a newline never matches
    (some engines let ``$`` match before a final newline, Python's fullmatch does not)."""
    exact = type_coerce(cast(text, LargeBinary), String) if dialect == "mysql" else text
    position = func.strpos if dialect in {"postgresql", "duckdb"} else func.instr
    return and_(exact.regexp_match(pattern), position(text, "\n") == 0)


def _valid_calendar_date(text):
    """The ``YYYY-MM-DD`` prefix of ``text`` is a real date (evaluate only where the grammar
    matched: the casts assume digits)."""
    year = cast(func.substr(text, 1, 4), Integer)
    month = cast(func.substr(text, 6, 2), Integer)
    day = cast(func.substr(text, 9, 2), Integer)
    leap = or_(and_(year % 4 == 0, year % 100 != 0), year % 400 == 0)
    last = case(
        (month == 2, case((leap, 29), else_=28)),
        (month.in_([4, 6, 9, 11]), 30),
        else_=31,
    )
    return day <= last


def _parse_text_timestamp(text, dialect: str):
    """ISO text (schemas.frames.ISO_TIMESTAMP) as a naive UTC timestamp; NULL when unparseable."""
    has_offset = _regex(text, ISO_OFFSET, dialect)
    moment: ColumnElement
    if dialect == "sqlite":
        moment = func.strftime("%Y-%m-%d %H:%M:%f", text)  # converts the offset to UTC
    elif dialect == "mysql":
        base = func.replace(func.regexp_replace(text, ISO_OFFSET, ""), "T", " ")
        naive = cast(base, mysql.DATETIME(fsp=6))
        sign = case((func.substr(text, -6, 1) == "-", -1), else_=1)
        minutes = sign * (
            cast(func.substr(text, -5, 2), Integer) * 60 + cast(func.substr(text, -2, 2), Integer)
        )
        numeric = and_(has_offset, func.right(text, 1) != "Z")
        moment = case(
            (numeric, func.timestampadd(literal_column("MINUTE"), -minutes, naive)), else_=naive
        )
    else:  # PostgreSQL, DuckDB
        moment = case(
            (has_offset, func.timezone("UTC", cast(text, DateTime(timezone=True)))),
            else_=cast(text, DateTime()),
        )
    calendar = case((_valid_calendar_date(text), moment), else_=null())
    return case((_regex(text, ISO_TIMESTAMP, dialect), calendar), else_=null())


def parsed_timestamp(column, dialect: str):
    """The column's timestamp as a naive UTC value the dialect compares correctly; NULL where the
    value is no timestamp. Time zones: timestamptz converted to UTC; timestamp and datetime
    without zone taken as UTC; a date as midnight UTC; ISO text with its offset (none: UTC).
    Numbers (epochs) and other types: NULL (quarantined as no timestamp)."""
    kind = underlying_type(column)
    if dialect == "sqlite":  # dynamically typed: whatever the declared type, values may be text
        return _parse_text_timestamp(cast(column, Text), dialect)
    if isinstance(kind, DateTime):
        if getattr(kind, "timezone", False) and dialect != "mysql":
            return func.timezone("UTC", column)
        return column
    if isinstance(kind, Date):
        if dialect == "clickhouse":  # a CAST to DateTime fails on a NULL date
            return func.toDateTime(column, "UTC")
        return cast(column, mysql.DATETIME(fsp=6) if dialect == "mysql" else DateTime())
    if _is_text(column):
        return _parse_text_timestamp(_as_text(column, dialect), dialect)
    return null()


def zero_date(column, dialect: str):
    """On ClickHouse, the condition that a Date or DateTime column holds its zero date (shown as
    0000-00-00), which ClickHouse stores for a moment it cannot hold (before 1970, say 1850): no
    real moment. None elsewhere: the other engines hold 1850 itself (and MariaDB's driver returns
    MariaDB's own zero date as text, which the timestamp rule refuses)."""
    if dialect != "clickhouse" or not isinstance(underlying_type(column), (Date, DateTime)):
        return None
    return func.toUInt32(column) == 0


def read_timestamp(column, dialect: str):
    """The timestamp column's value as read: the column itself; on ClickHouse its text in UTC
    and the zero date as ClickHouse shows it, which the timestamp rule refuses as no timestamp
    (its HTTP driver would read the zero date as NULL)."""
    zero = zero_date(column, dialect)
    if zero is None:
        return column
    is_datetime = isinstance(underlying_type(column), DateTime)
    shown = literal("0000-00-00 00:00:00" if is_datetime else "0000-00-00", Text)
    text = func.toString(column, "UTC") if is_datetime else func.toString(column)
    return case((zero, shown), else_=text)


def bound(moment: datetime, dialect: str, aware: bool = False):
    """A UTC moment as the value ``parsed_timestamp`` compares with (``aware``: as a moment with
    zone, for a timestamptz column itself)."""
    if aware:
        return literal(moment.astimezone(UTC), DateTime(timezone=True))
    naive = moment.astimezone(UTC).replace(tzinfo=None)
    if dialect == "sqlite":
        return literal(naive.strftime("%Y-%m-%d %H:%M:%S.%f")[:23], Text)
    return literal(naive, DateTime())


def seconds_between(later, earlier, dialect: str):
    """Seconds from ``earlier`` (None: the epoch) to ``later``, two parsed_timestamp values (naive
    UTC), as a double; NULL on an engine without the arithmetic here."""
    if dialect == "sqlite":
        start = literal(2440587.5) if earlier is None else func.julianday(earlier)
        return (func.julianday(later) - start) * literal(86400.0)
    if dialect == "mysql":
        start = literal("1970-01-01 00:00:00") if earlier is None else earlier
        micro = func.timestampdiff(literal_column("MICROSECOND"), start, later)
        return to_double(micro) / literal(1e6)
    if dialect in ("postgresql", "duckdb"):
        seconds: ColumnElement = func.extract("epoch", later)
        if earlier is not None:
            seconds = seconds - func.extract("epoch", earlier)
        return to_double(seconds)
    return null()


def exact_number(column, dialect: str):
    """A floating-point column read as a double (else the column itself): a single-precision
    value (PostgreSQL real, MariaDB FLOAT, ClickHouse Float32) widened exactly, the number SQL
    compares, where drivers return its shortest or 6-digit decimal, another number (0.1 for
    0.100000001490116...), which would fall on the other side of a bin edge or threshold."""
    if dialect != "sqlite" and isinstance(underlying_type(column), Float):
        return to_double(column)
    return column


def parsed_number(column, dialect: str):
    """The column as a double where it holds a number (text in DECIMAL_TEXT); NULL otherwise
    (a typed column's NaN stays NaN, which fails every comparison the rules make but ``>=``)."""
    if isinstance(column, to_double):
        return column
    kind = underlying_type(column)
    if dialect != "sqlite" and isinstance(kind, Boolean):
        return null()
    if dialect != "sqlite" and isinstance(kind, (Numeric, Float, Integer)):
        return to_double(column)
    text = _as_text(column, dialect)
    # the grammar allows spaces around; they are trimmed before the cast, which every dialect
    # then reads exactly (an exponent, a lone sign or point: schemas.grammar.DECIMAL_TEXT)
    number = to_double(func.trim(text))
    if dialect == "sqlite":  # numbers stored as numbers; text only in the grammar
        is_number = func.typeof(column).in_(["integer", "real"])
        return case(
            (is_number, to_double(column)),
            (_regex(text, DECIMAL_TEXT, dialect), number),
            else_=null(),
        )
    if _is_text(column):
        return case((_regex(text, DECIMAL_TEXT, dialect), number), else_=null())
    return null()


def _json_key(table: Table, key: str, dialect: str):
    """The JSON attributes column's value under ``key``, looked up as a key (never a path)."""
    column = table.c[ATTRIBUTES_JSON]
    if dialect == "sqlite" and ('"' in key or "\\" in key):  # no JSON path can name it
        each = func.json_each(column).table_valued("key", "value")
        return select(each.c.value).where(each.c.key == key).scalar_subquery()
    if dialect == "mysql":
        escaped = key.replace("\\", "\\\\").replace('"', '\\"')
        return func.json_unquote(func.json_extract(column, literal(f'$."{escaped}"')))
    return column[key].as_string()


class Window:
    """The canonical columns of one audit's source, as SQL expressions, and the window filter."""

    def __init__(self, table: Table, audit: Audit, dialect: str):
        problems = table_problems(table, audit, dialect)
        if problems:
            raise SourceError("; ".join(problems))
        self.table, self.audit, self.dialect = table, audit, dialect
        found = source_columns(table, audit)
        # canonical name -> expression of the raw value, in the order rows are fingerprinted
        self.raw: dict[str, Any] = {"prediction_id": found["prediction_id"]}
        when = found["predicted_at"]  # None: the rows have no timestamp (window "all")
        if when is not None:
            self.raw["predicted_at"] = read_timestamp(when, dialect)
        self.raw["y_true"] = found["y_true"]
        if not audit.decision:
            self.raw["y_pred"] = found["y_pred"]
        self.model, self.version = found["model_id"], found["model_version"]
        self.raw["model_id"] = self.model if self.model is not None else literal(audit.model_id)
        self.raw["model_version"] = self.version if self.version is not None else null()
        score = found["score"]
        if audit.decision and score is not None and score.name == audit.decision.score:
            # Read for the decision, the column is on the threshold's scale (a decile 1..10 with
            # threshold 5), not a probability: its rule is the decision score's, not [0, 1].
            score = None
        self.has_score = score is not None
        # Scores are read as the numbers SQL compares (a single-precision float widened).
        self.raw["score"] = exact_number(score, dialect) if score is not None else null()
        if audit.decision:
            self.raw["decision_score"] = exact_number(found["decision_score"], dialect)
        for attribute in audit.attributes:
            column = found[attribute]
            if column is None:
                self.raw[attribute] = _json_key(table, attribute, dialect)
            elif isinstance(underlying_type(column), Enum) and dialect != "sqlite":
                self.raw[attribute] = cast(column, Text)
            else:
                self.raw[attribute] = column
        self.when = when
        self.time = None if when is None else parsed_timestamp(when, dialect)
        # When each label arrived (the optional ``labelled_at``), as the time SQL compares.
        arrived = found["labelled_at"]
        self.arrival = None if arrived is None else parsed_timestamp(arrived, dialect)
        self.zero = None if when is None else zero_date(when, dialect)

    def delay(self):
        """Seconds from the prediction (``predicted_at``, where the source has it; else the
        epoch) to its label's arrival (``labelled_at``), as a double; NULL where either is no
        timestamp, or on an engine this has no date arithmetic for (ClickHouse, Spark SQL)."""
        if self.arrival is None:
            return null()
        return seconds_between(self.arrival, self.time, self.dialect)

    def key(self, canonical: str):
        """The expression to group and compare on: exact text on MariaDB/MySQL."""
        expression = self.raw[canonical]
        if self.dialect == "mysql" and isinstance(underlying_type(expression), (String, NullType)):
            return collate(expression, MYSQL_EXACT)
        return expression

    def where(self, start: datetime | None, end: datetime, now: datetime, version: bool = True):
        """The model (and, with ``version``, version) filter and the window on the parsed
        timestamp. Rows with no plausible timestamp (ClickHouse's zero date among them) and rows
        in the future (later than ``now`` plus the clock skew) are in every window, to be
        quarantined; rows before ``start``, or after ``end`` but not in the future, are outside
        it."""
        conditions = []
        if self.model is not None:
            conditions.append(self.model == self.audit.model_id)
        if version and self.version is not None and self.audit.model_version is not None:
            conditions.append(self.version == self.audit.model_version)
        if self.time is not None:  # rows without a timestamp are in the window "all"
            t, aware = self._filter_time()
            d = self.dialect
            inside = t <= bound(end, d, aware)
            if start is not None:
                inside = and_(t > bound(start, d, aware), inside)
            # SQLite rounds times to the millisecond: its bound is lowered so that no future row
            # escapes (a row a few milliseconds short of the future may be read, and accepted).
            future = max(end, now + CLOCK_SKEW) - (MARGIN if d == "sqlite" else timedelta(0))
            implausible = [t.is_(None)]
            # Without a start, a time before EARLIEST or ClickHouse's zero date (the epoch) is
            # at or before the end, so inside already: no test of its own per row.
            if start is not None or end.replace(tzinfo=end.tzinfo or UTC) < AFTER_EPOCH:
                implausible.append(t < bound(EARLIEST, d, aware))
                implausible += [] if self.zero is None else [self.zero]
            conditions.append(or_(inside, t > bound(future, d, aware), *implausible))
        return and_(true(), *conditions)

    def _filter_time(self):
        """(expression, aware) to filter the window on: a typed timestamp column itself (so an
        index on it serves), compared with aware bounds when it has a zone; else the parsed
        time."""
        column = self.when
        kind = underlying_type(column)
        if self.dialect != "sqlite" and isinstance(kind, DateTime):
            return column, bool(getattr(kind, "timezone", False)) and self.dialect != "mysql"
        return self.time, False

    def selected(self):
        """The raw values under canonical names, as the driver returns them (no type processing:
        SQLite's declared types do not bind its values)."""
        return [type_coerce(e, NullType()).label(name) for name, e in self.raw.items()]

    def query(self, start: datetime | None, end: datetime, now: datetime):
        return select(*self.selected()).where(self.where(start, end, now))

    def row_ok(self, now: datetime):
        """True only for rows the Pandera rules accept on the per-row rules (a sound filter: a
        row it does not pass is judged by Pandera). Attribute and label rules are checked on the
        grouped keys instead (db.scan).

        Rules that the catalogue or the model filter already guarantee are left out, so the
        scan pays per row only for what can fail: a NOT NULL (or primary key) id needs no null
        check, a non-text id no text check, and the model filter implies a model id. A text id
        holds more than spaces if it sorts at or after ``'!'`` byte by byte (its first byte is
        above the space): one comparison, no TRIM; ids that sort before (tabs, leading spaces)
        are merely fetched and judged by Pandera."""
        c, d = self.raw, self.dialect
        ident = c["prediction_id"]
        rules = []  # a rule that is NULL (a NULL value) fails: db.scan counts only TRUE
        if d == "sqlite" or _is_text(ident):
            rules.append(_bytewise(_as_text(ident, d), d) >= literal("!", Text))
        elif getattr(ident, "nullable", True):
            rules.append(ident.is_not(None))
        if self.time is not None:
            t, aware = self._filter_time()
            rules.append(t <= bound(now + CLOCK_SKEW - MARGIN, d, aware))  # future rows are read
            if self.zero is None:
                rules.append(t >= bound(EARLIEST + MARGIN, d, aware))
            else:  # ClickHouse's zero date (1970) is the least value its dates hold
                rules.append(not_(self.zero))
        if self.has_score:
            score, number = c["score"], parsed_number(c["score"], d)
            rules.append(or_(score.is_(None), and_(number >= 0, number <= 1)))
        if "decision_score" in c:
            number = parsed_number(c["decision_score"], d)
            rules.append(and_(number >= -1e300, number <= 1e300))  # finite (NaN fails too)
        return and_(true(), *rules)


def _bytewise(text, dialect: str):
    """``text`` compared byte by byte (code point order) on every dialect."""
    collation = {"postgresql": "C", "mysql": MYSQL_EXACT, "sqlite": "BINARY"}.get(dialect)
    return collate(text, collation) if collation else text


def window_of(engine_or_connection, audit: Audit) -> Window:
    table = reflect_source(engine_or_connection, audit.source)
    return Window(table, audit, _dialect(engine_or_connection))


def rows_frame(result, columns) -> pd.DataFrame:
    """A frame of driver values, one object column each (no dtype inference). A result is read
    whole by ``all()``: row by row, clickhouse-sqlalchemy's HTTP cursor pops each row from the
    front of its prefetched list, a time quadratic in the rows (benchmarks/README.md, the
    engines' memory scans)."""
    rows = result if isinstance(result, list) else result.all()
    return pd.DataFrame(
        {name: pd.Series([r[i] for r in rows], dtype=object) for i, name in enumerate(columns)}
    )


def read_chunks(connection, query, chunk_rows: int) -> Iterator[pd.DataFrame]:
    """The query's rows in frames of at most ``chunk_rows`` (a server-side cursor)."""
    streaming = connection.execution_options(stream_results=True, yield_per=chunk_rows)
    result = streaming.execute(query)
    columns = list(result.keys())
    for part in result.partitions(chunk_rows):
        yield rows_frame(part, columns)


def read_predictions(
    engine: Engine, audit: Audit, start: datetime | None, end: datetime, now: datetime
):
    """The audit window (with the rows in the future at ``now``) as a frame with canonical
    columns, as the source holds them.

    An empty window is an error that says whether the model has predictions at all.
    """
    window = window_of(engine, audit)
    with engine.connect() as connection:
        result = connection.execute(window.query(start, end, now))
        frame = rows_frame(result, list(result.keys()))
        if frame.empty:
            raise EmptyWindow(empty_window_message(connection, window, start, end, now))
    return frame


def empty_window_message(connection, window: Window, start, end, now: datetime) -> str:
    """Why a window is empty, in one line: an unknown model (naming known ones), rows of the model
    in the window but none of the configured model_version (naming the versions there), or no
    rows in the window."""
    audit = window.audit
    span = f"window ({start or '-inf'}, {end}]"
    if window.model is not None:
        known = select(window.model).where(window.model == audit.model_id).limit(1)
        if connection.execute(known).first() is None:
            models = connection.execute(select(window.model).distinct().limit(20)).scalars()
            return (
                f"unknown model {audit.model_id!r}: {audit.source!r} holds predictions of "
                f"{sorted(map(str, models))}"
            )
    of_model = f" of model {audit.model_id!r}" if window.model is not None else ""
    version = audit.model_version
    if window.version is not None and version is not None:
        versions = dict(
            connection.execute(
                select(window.version, func.count())
                .where(window.where(start, end, now, version=False))
                .group_by(window.version)
            ).all()
        )
        if versions:
            present = _listing(sorted("NULL" if v is None else repr(str(v)) for v in versions))
            return (
                f"{sum(versions.values())} predictions{of_model} in {audit.source!r} for {span}, "
                f"but none of model_version {version!r}; versions present: {present}"
            )
        of_model += f" (model_version {version!r})"
    return f"no predictions{of_model} in {audit.source!r} for {span}"


# The hash of a missing value (None, NaN, NaT, NA), whatever the column's type.
MISSING_HASH = np.uint64(0x9E3779B97F4A7C15)
# The hash of a NaN: that of the text ``nan`` (column_hashes).
NAN_HASH = pd.util.hash_array(np.array(["nan"], dtype=object), categorize=False)[0]
ROW_PRIME = np.uint64(1099511628211)
# Values sampled to tell a column of (mostly) distinct texts from one of few groups.
SAMPLE = 1000


def _text_hashes(series: pd.Series, kind: str) -> np.ndarray:
    """Hashes of the values' ``str``, each distinct value formatted and hashed once where the
    column holds one type (factorize would merge 1, 1.0 and True in a mixed object column)."""
    typed = not pd.api.types.is_object_dtype(series.dtype)
    if kind == "string" and series.iloc[:SAMPLE].nunique() > SAMPLE // 2:  # ids: mostly distinct
        return pd.util.hash_array(series.to_numpy(dtype=object, na_value=""), categorize=False)
    if typed or kind in {"string", "integer", "boolean"}:
        codes, uniques = pd.factorize(series)
        texts = np.array([str(v) for v in np.asarray(uniques, dtype=object)] + [""], dtype=object)
        return pd.util.hash_array(texts, categorize=False)[codes]
    texts = np.array([str(v) for v in series.to_numpy(dtype=object)], dtype=object)
    return pd.util.hash_array(texts, categorize=False)


def column_hashes(series: pd.Series) -> np.ndarray:
    """A uint64 hash of each value by its meaning, equal for a driver's Python values (object
    columns) and the same values read as typed columns (db.stream): floats by their double,
    timestamps by their UTC microsecond, every other value by its ``str``; missing values alike,
    and a NaN (float or Decimal: no missing value) as the text ``nan`` (which ADBC gives for a
    PostgreSQL numeric NaN)."""
    missing = series.isna().to_numpy(dtype=bool)
    nan = np.zeros(len(series), dtype=bool)
    if pd.api.types.is_object_dtype(series.dtype) and missing.any():
        values = series.to_numpy(dtype=object)
        for i in np.flatnonzero(missing):
            nan[i] = isinstance(values[i], (float, np.floating, Decimal))
        missing = missing & ~nan
    kind = pd.api.types.infer_dtype(series, skipna=True)
    if kind == "floating":
        hashes = pd.util.hash_array(series.to_numpy(dtype="float64", na_value=0.0))
    elif kind in {"datetime", "datetime64"}:
        moments = pd.to_datetime(series, utc=True).astype("datetime64[us, UTC]")
        hashes = pd.util.hash_array(moments.to_numpy(dtype="int64", na_value=0))
    else:
        hashes = _text_hashes(series, kind)
    return np.where(missing, MISSING_HASH, np.where(nan, NAN_HASH, hashes))


def row_hash_sum(frame: pd.DataFrame) -> int:
    """Sum (mod 2^64) of the rows' hashes: order-independent and additive over chunks.

    A row's column_hashes are combined in column order, then mixed by pandas' hash_array (the
    splitmix64 finaliser). Unmixed, the combination is linear, so the sum would be one of
    per-column sums, blind to values moved between rows (predictions swapped between groups)."""
    rows = np.zeros(len(frame), dtype=np.uint64)
    for name in frame.columns:
        rows = rows * ROW_PRIME + column_hashes(frame[name])
    return int(pd.util.hash_array(rows).sum(dtype=np.uint64))


def fingerprint(frame: pd.DataFrame | None, hash_sum: int = 0, rows: int = 0) -> str:
    """SHA-256 of the row count and the sum of row hashes: equal inputs (in any order, in any
    chunks) give equal fingerprints, and any changed row (a value changed, or moved to another
    row) another one. Pass a frame, or a streamed (hash_sum, rows) pair."""
    if frame is not None:
        hash_sum, rows = row_hash_sum(frame), len(frame)
    return hashlib.sha256(f"{rows}:{hash_sum}".encode()).hexdigest()
