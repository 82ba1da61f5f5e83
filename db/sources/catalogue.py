"""Where an audit's source is and what its catalogue says: the table as reflected, the column
for each canonical column and attribute, and every reason it cannot be the audit's source.

Table and column names from configuration are looked up in the database's own catalogue
(reflection) and used as SQLAlchemy objects, never pasted into SQL. Before any row is read, the
table is checked against the audit from the catalogue alone (``table_problems``, also run by
``biasaudit audits``): every column the audit needs exists, none is of a type whose values would
all fail their rule, and the engine's module can read it safely; each problem is one line.
"""

from __future__ import annotations

import os

from sqlalchemy import Column, Connection, Engine, Table
from sqlalchemy.engine import make_url
from sqlalchemy.exc import NoSuchTableError, SQLAlchemyError

from biasaudit.db.sources.engines import SourceEngine, engine_for
from biasaudit.db.sources.engines.base import ATTRIBUTES_JSON
from biasaudit.db.sources.types import kind_of, underlying_type
from biasaudit.schemas.config import CANONICAL_COLUMNS, Audit

# Canonical columns every source has (y_pred unless a decision is derived from a score);
# predicted_at where the audit's window or monitor needs it (Audit.timestamp_needed_by).
REQUIRED = ("prediction_id", "y_true", "y_pred")
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
# ... and on an engine whose module parses no text (SourceEngine.parses_text).
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


def source_engine(bind: Engine | Connection) -> SourceEngine:
    """The module of the engine ``bind`` connects to."""
    return engine_for(bind.dialect.name)


def listing(names: list[str]) -> str:
    """Names for a message: the first LISTED of them, and how many more."""
    if not names:
        return "nothing"
    more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
    return ", ".join(names[:LISTED]) + more


def _no_table(bind: Engine | Connection, schema: str, name: str) -> str:
    """Why the source cannot be found, with the tables and views its schema does have."""
    try:
        names = source_engine(bind).table_names(bind.engine, schema)
    except SQLAlchemyError:  # no such schema (MariaDB: database) either
        names = []
    where = f"schema {schema!r}" if schema else "the database"
    return (
        f"source {'.'.join(filter(None, [schema, name]))!r}: no such table or view in {where}; "
        f"it has: {listing(sorted(names))}"
    )


def reflect_source(bind: Engine | Connection, source: str) -> Table:
    """The source table or view as the database describes it (``schema.table`` allowed), read
    through ``bind``: given the scan's connection, no other connection is checked out (each
    checkout is a round trip to test it, a slow one on Spark's Thrift server)."""
    schema, _, name = source.rpartition(".")
    try:
        return source_engine(bind).reflect(bind, schema, name)
    except NoSuchTableError:
        raise SourceError(_no_table(bind, schema, name)) from None


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


def table_problems(table: Table, audit: Audit, engine: SourceEngine) -> list[str]:
    """Why ``table`` cannot be the audit's source on ``engine``, one line each (empty: it can): a
    column the audit needs is missing, or of a type whose values would all fail their rule (not
    judged where declared types do not bind values), or what the engine's module refuses."""
    needed, has = _needed(audit), listing(list(table.c.keys()))
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
        typed = TYPED.get(canonical) if not engine.parses_text and not is_attribute else None
        readable = typed or READABLE.get("attribute" if is_attribute else canonical)
        if readable and engine.types_bind and kind_of(column) not in readable:
            what = f"attribute {canonical!r}" if is_attribute else canonical
            kinds = f"{', '.join(readable[:-1])} or {readable[-1]}" if readable[1:] else readable[0]
            problems.append(
                f"source {audit.source!r}: column {name!r} ({what}) is of type "
                f"{type(underlying_type(column)).__name__}; {what} is read from a {kinds} column"
                + (f" on {engine.label}" if typed else "")
            )
    return problems + engine.refusals(table, audit)


def source_problems(engine: Engine, audit: Audit) -> list[str]:
    """Why the audit's source cannot be read, one line each (empty: it can), from the database's
    catalogue alone: no row is read."""
    try:
        table = reflect_source(engine, audit.source)
    except SourceError as exc:
        return [str(exc)]
    return table_problems(table, audit, source_engine(engine))
