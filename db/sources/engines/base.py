"""The one protocol every source engine's module implements: each SQL expression, catalogue query
and reader whose form depends on the engine, with the defaults most engines share.

A module per engine (db.sources.engines.sqlite, ...) subclasses ``SourceEngine`` and overrides
what its engine does otherwise; ``db.sources.engines.engine_for`` picks it by SQLAlchemy's dialect
name. The rest of db.sources writes no engine's name.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from sqlalchemy import (
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
    MetaData,
    Numeric,
    String,
    Table,
    Text,
    and_,
    case,
    cast,
    collate,
    func,
    inspect,
    literal,
    null,
    or_,
    select,
)
from sqlalchemy.exc import NoSuchTableError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from biasaudit.db.sources.types import is_text, underlying_type
from biasaudit.schemas.config import Audit
from biasaudit.schemas.grammar import DECIMAL_TEXT, ISO_OFFSET, ISO_TIMESTAMP

# The JSON column attributes are read from where the source has no column of their name.
ATTRIBUTES_JSON = "attributes"


class to_double(FunctionElement):
    """CAST(x AS DOUBLE PRECISION); each engine's module compiles its own form."""

    type = Double()
    inherit_cache = True


@compiles(to_double)
def _to_double(element, compiler, **kw):
    return f"CAST({compiler.process(element.clauses, **kw)} AS DOUBLE PRECISION)"


def cast_as_double(element, compiler, **kw):
    """``CAST(x AS DOUBLE)``, the form of the engines that name the type so."""
    return f"CAST({compiler.process(element.clauses, **kw)} AS DOUBLE)"


class floor_of(FunctionElement):
    """FLOOR(x) as a whole number (db.sources.pushdown_sql's score cells, x >= 0)."""

    inherit_cache = True


@compiles(floor_of)
def _floor_of(element, compiler, **kw):
    return f"FLOOR({compiler.process(element.clauses, **kw)})"


def valid_calendar_date(text):
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


def iso_cast_in_utc(engine: SourceEngine, text):
    """ISO text as a naive UTC timestamp by the SQL standard's casts: with an offset, through a
    timestamp with time zone (PostgreSQL, DuckDB)."""
    return case(
        (
            engine.matches(text, ISO_OFFSET),
            func.timezone("UTC", cast(text, DateTime(timezone=True))),
        ),
        else_=cast(text, DateTime()),
    )


def epoch_seconds(later, earlier):
    """Seconds from ``earlier`` (None: the epoch) to ``later`` by ``EXTRACT(EPOCH ...)``."""
    seconds: ColumnElement = func.extract("epoch", later)
    if earlier is not None:
        seconds = seconds - func.extract("epoch", earlier)
    return to_double(seconds)


def compiled(connection: Connection, query):
    """The query compiled for the connection's dialect, IN lists expanded into parameters."""
    return query.compile(dialect=connection.dialect, compile_kwargs={"render_postcompile": True})


def connection_of(bind: Engine | Connection):
    """A context giving ``bind`` itself where it is a connection, else a new one of it."""
    return nullcontext(bind) if isinstance(bind, Connection) else bind.connect()


def reflected_keys(inspector, table) -> list[list[str]]:
    """The column lists of the table's primary key, unique constraints and unique indexes, as the
    dialect reflects them. A dialect that cannot reflect one (NotImplementedError) or answers in
    another shape (PyHive's primary key is a list) knows no key there: the duplicate scan runs."""

    def entries(call) -> list[dict]:
        try:
            found = call(table.name, table.schema)
        except NotImplementedError:
            return []
        return [e for e in (found if isinstance(found, list) else [found]) if isinstance(e, dict)]

    keys = [e.get("constrained_columns") for e in entries(inspector.get_pk_constraint)]
    keys += [e.get("column_names") for e in entries(inspector.get_unique_constraints)]
    keys += [e.get("column_names") for e in entries(inspector.get_indexes) if e.get("unique")]
    return [k for k in keys if isinstance(k, list) and all(isinstance(c, str) for c in k)]


class SourceEngine:
    """How one engine's SQL reads an audit's source. Class attributes say what the engine can do;
    methods build its expressions from reflected columns (``column``) and SQL text values
    (``text``)."""

    #: SQLAlchemy's dialect name (MariaDB's is MySQL's: one module).
    name = ""
    #: The engine as messages name it.
    label = ""
    #: Whether the SQL here parses text timestamps and numbers on the engine (regular
    #: expressions, casts); where not, they are read from typed columns only.
    parses_text = True
    #: Whether the declared types bind the values (not on SQLite: any value in any column).
    types_bind = True
    #: Whether a timestamp type with a zone is compared as a moment (MariaDB/MySQL's are not).
    zones = True
    #: How far the future bound is lowered for the engine's rounding of times.
    margin = timedelta(0)
    #: The collation that compares text byte by byte (None: the engine's default does).
    bytewise_collation: str | None = None
    #: The function giving the position of a substring (0: absent).
    position = "instr"
    #: Whether tables are reflected from their columns alone (``columns_only``), where the
    #: dialect's whole-table reflection sends statements for what a scan does not use.
    reflects_columns_only = False

    def refusals(self, table: Table, audit: Audit) -> list[str]:
        """What the engine's module cannot do safely for this source and audit, one line each."""
        return []

    def duplicates_refusal(self, table: Table, audit: Audit) -> str | None:
        """Why the window's repeated prediction ids cannot be found in SQL here (None: they can)."""
        return None

    # The catalogue.

    def reflect(self, bind: Engine | Connection, schema: str, name: str) -> Table:
        """The table or view ``schema.name`` as the dialect reflects it (NoSuchTableError)."""
        if self.reflects_columns_only:
            return columns_only(self, bind, schema, name)
        return Table(name, MetaData(), autoload_with=bind, schema=schema or None)

    def table_names(self, bind: Engine | Connection, schema: str) -> list[str]:
        """The tables and views of ``schema`` (the connection's own where empty)."""
        inspector = inspect(bind)
        return inspector.get_table_names(schema or None) + inspector.get_view_names(schema or None)

    def unique_keys(self, connection: Connection, table: Table) -> list[list[str]]:
        """The column lists of the table's primary key and unique constraints and indexes."""
        return reflected_keys(inspect(connection), table)

    # Values.

    def as_text(self, column):
        """The column as text (cast where its type is no text, or values need not have it)."""
        kind = underlying_type(column)
        if self.types_bind and isinstance(kind, String) and not isinstance(kind, Enum):
            return column
        return cast(column, Text)

    def attribute(self, column):
        """An attribute column as it is grouped: an Enum as its text."""
        if isinstance(underlying_type(column), Enum) and self.types_bind:
            return cast(column, Text)
        return column

    def exact(self, text):
        """``text`` as the regular expressions compare it, case-sensitively."""
        return text

    def matches(self, text, pattern: str):
        """``text`` matches ``pattern``, case-sensitively; a newline never matches (some engines
        let ``$`` match before a final newline, Python's fullmatch does not)."""
        position = getattr(func, self.position)
        return and_(self.exact(text).regexp_match(pattern), position(text, "\n") == 0)

    def iso_moment(self, text):
        """ISO text (schemas.grammar.ISO_TIMESTAMP) as a naive UTC timestamp, where it matched."""
        raise NotImplementedError(f"{self.label}: no text timestamps")

    def text_timestamp(self, text):
        """ISO text as a naive UTC timestamp; NULL when unparseable."""
        calendar = case((valid_calendar_date(text), self.iso_moment(text)), else_=null())
        return case((self.matches(text, ISO_TIMESTAMP), calendar), else_=null())

    def in_utc(self, column):
        """A timestamp column with a zone as naive UTC."""
        return func.timezone("UTC", column)

    def date_as_timestamp(self, column):
        """A date column as midnight UTC."""
        return cast(column, DateTime())

    def parsed_timestamp(self, column):
        """The column's timestamp as a naive UTC value the engine compares correctly; NULL where
        the value is no timestamp. Time zones: with a zone converted to UTC; without one taken as
        UTC; a date as midnight UTC; ISO text with its offset (none: UTC). Numbers (epochs) and
        other types: NULL (quarantined as no timestamp)."""
        kind = underlying_type(column)
        if isinstance(kind, DateTime):
            return (
                self.in_utc(column) if getattr(kind, "timezone", False) and self.zones else column
            )
        if isinstance(kind, Date):
            return self.date_as_timestamp(column)
        if is_text(column):
            return self.text_timestamp(self.as_text(column))
        return null()

    def zero_date(self, column):
        """The condition that a date column holds a zero date (no real moment); None: none."""
        return

    def read_timestamp(self, column):
        """The timestamp column's value as it is read (and fingerprinted)."""
        return column

    def bound(self, moment: datetime, aware: bool = False):
        """A UTC moment as the value ``parsed_timestamp`` compares with (``aware``: as a moment
        with zone, for a column with a zone itself)."""
        if aware:
            return literal(moment.astimezone(UTC), DateTime(timezone=True))
        return literal(moment.astimezone(UTC).replace(tzinfo=None), DateTime())

    def filter_time(self, column, parsed):
        """(expression, aware) to filter the window on: a typed timestamp column itself (so an
        index on it serves), compared with aware bounds when it has a zone; else ``parsed``."""
        kind = underlying_type(column)
        if self.types_bind and isinstance(kind, DateTime):
            return column, bool(getattr(kind, "timezone", False)) and self.zones
        return parsed, False

    def seconds_between(self, later, earlier):
        """Seconds from ``earlier`` (None: the epoch) to ``later``, two ``parsed_timestamp``
        values, as a double; NULL where the engine has no date arithmetic here."""
        return null()

    def exact_number(self, column):
        """A floating-point column read as a double (else the column itself): a single-precision
        value widened exactly, the number SQL compares, where drivers return its shortest
        decimal, another number (0.1 for 0.100000001490116...), which would fall on the other
        side of a bin edge or threshold."""
        if self.types_bind and isinstance(underlying_type(column), Float):
            return to_double(column)
        return column

    def parsed_number(self, column):
        """The column as a double where it holds a number (text in DECIMAL_TEXT); NULL otherwise
        (a typed column's NaN stays NaN, which fails every comparison the rules make but
        ``>=``)."""
        if isinstance(column, to_double):
            return column
        kind = underlying_type(column)
        if isinstance(kind, Boolean):
            return null()
        if isinstance(kind, (Numeric, Float, Integer)):
            return to_double(column)
        if is_text(column):
            text = self.as_text(column)
            # the grammar allows spaces around; they are trimmed before the cast, which the
            # engines then read exactly (an exponent, a lone sign or point: DECIMAL_TEXT)
            number = to_double(func.trim(text))
            return case((self.matches(text, DECIMAL_TEXT), number), else_=null())
        return null()

    def json_key(self, column, key: str):
        """A JSON column's value under ``key``, looked up as a key (never a path)."""
        return column[key].as_string()

    def key(self, expression):
        """The expression to group and compare on."""
        return expression

    def bytewise(self, text):
        """``text`` compared byte by byte (code point order)."""
        return collate(text, self.bytewise_collation) if self.bytewise_collation else text

    def non_empty(self, text):
        """``text`` holds more than spaces: it sorts at or after ``'!'`` byte by byte (its first
        byte is above the space), one comparison and no TRIM; ids that sort before (tabs,
        leading spaces) are merely fetched and judged by Pandera."""
        return self.bytewise(text) >= literal("!", Text)

    # Push-down and stream.

    def grouped(self, keys: list, names: list[str], ok, per_row: dict, in_window):
        """The push-down's GROUP BY: per combination of ``keys`` (labelled ``k_NAME``), the rows
        ``n``, the rows the per-row rules ``ok`` do not clear (``suspect``) and the sum of each
        ``per_row`` expression, over the rows ``in_window``; grouped over a derived table."""
        inner = (
            select(
                *keys,
                case((ok, 0), else_=1).label("suspect"),
                *[e.label(f"r_{n}") for n, e in per_row.items()],
            )
            .where(in_window)
            .subquery()
        )
        grouping = [inner.c[f"k_{n}"] for n in names]
        sums = [func.count().label("n"), func.sum(inner.c.suspect).label("suspect")]
        sums += [func.sum(inner.c[f"r_{name}"]).label(name) for name in per_row]
        return select(*grouping, *sums).group_by(*grouping)

    def arrow_batches(
        self, connection: Connection, query, chunk_rows: int
    ) -> tuple[Iterator[pa.RecordBatch] | None, float | None]:
        """The query's rows as Arrow record batches, and how long one may take to come (None: no
        limit); (None, None) where the engine has no Arrow reader here (the cursor reads)."""
        return None, None


def columns_only(engine: SourceEngine, bind: Engine | Connection, schema: str, name: str) -> Table:
    """A table's columns from the dialect's column reflection alone (one ``DESCRIBE``), where
    whole-table reflection sends more statements for what a scan does not use."""
    try:
        found = inspect(bind).get_columns(name, schema or None)
    except Exception:  # the dialects pass on the server's own error for a missing table
        if _unlisted(engine, bind, schema, name):
            raise NoSuchTableError(name) from None
        raise
    columns = [Column(c["name"], c["type"], nullable=c.get("nullable", True)) for c in found]
    return Table(name, MetaData(), *columns, schema=schema or None)


def _unlisted(engine: SourceEngine, bind: Engine | Connection, schema: str, name: str) -> bool:
    """Whether the schema's tables and views, listed, lack ``name``; False where they cannot be
    listed (a dropped connection): the error that led here is then the one to report."""
    try:
        return name not in engine.table_names(bind, schema)
    except Exception:  # noqa: BLE001 - whatever a dialect raises, the first error is reported
        return False
