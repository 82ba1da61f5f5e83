"""The audit's source: read one audit's window of predictions from its table or view.

Table and column names from configuration are looked up in the database's own catalogue (reflection)
and used as SQLAlchemy objects, never pasted into SQL; values are bound parameters.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import numpy as np
import pandas as pd
from biasaudit.schemas.config import Audit
from sqlalchemy import Engine, MetaData, Table, literal, null, select
from sqlalchemy.exc import NoSuchTableError

REQUIRED = ("prediction_id", "predicted_at", "y_true", "y_pred")
ATTRIBUTES_JSON = "attributes"


class SourceError(LookupError):
    """The configured source table or one of its mapped columns does not exist."""


class EmptyWindow(LookupError):
    """The audit window holds no predictions for the model (or the model has none at all)."""


def window_bounds(audit: Audit, as_of: datetime) -> tuple[datetime | None, datetime]:
    """(start, end] of the audit window ending at ``as_of`` (UTC); start is None for all time."""
    end = as_of.astimezone(UTC) if as_of.tzinfo else as_of.replace(tzinfo=UTC)
    length = audit.window_length
    return (None if length is None else end - length), end


def reflect_source(engine: Engine, source: str) -> Table:
    """The source table or view as the database describes it (``schema.table`` allowed)."""
    schema, _, name = source.rpartition(".")
    try:
        return Table(name, MetaData(), autoload_with=engine, schema=schema or None)
    except NoSuchTableError:
        raise SourceError(f"source {source!r}: no such table or view in the database") from None


def source_query(
    table: Table, audit: Audit, start: datetime | None, end: datetime, naive_utc: bool = False
):
    """SELECT of the audit window with canonical column names, from ``table`` through the mapping.

    ``naive_utc`` binds the window bounds without time zone (SQLite stores naive UTC text).
    """

    def column(canonical: str, required: bool):
        name = audit.source_column(canonical)
        if name in table.c:
            return table.c[name].label(canonical)
        if required or canonical in audit.columns:  # an explicit mapping must exist
            raise SourceError(f"source {table.name!r}: column {name!r} (for {canonical}) not found")
        return None

    selected = [column(c, True) for c in REQUIRED]
    model = column("model_id", False)
    selected.append(model if model is not None else literal(audit.model_id).label("model_id"))
    version = column("model_version", False)
    selected.append(version if version is not None else null().label("model_version"))
    score = column("score", False)
    selected.append(score if score is not None else null().label("score"))
    for attribute in audit.attributes:
        found = column(attribute, False)
        if found is None:
            if ATTRIBUTES_JSON not in table.c:
                raise SourceError(
                    f"source {table.name!r}: no column {audit.source_column(attribute)!r} "
                    f"for attribute {attribute!r}, and no {ATTRIBUTES_JSON!r} JSON column"
                )
            found = table.c[ATTRIBUTES_JSON][attribute].as_string().label(attribute)
        selected.append(found)

    query = select(*selected)
    if model is not None:
        query = query.where(table.c[audit.source_column("model_id")] == audit.model_id)
    if audit.model_version is not None:
        if version is None:
            raise SourceError(f"source {table.name!r}: model_version is configured but not mapped")
        query = query.where(table.c[audit.source_column("model_version")] == audit.model_version)
    time = table.c[audit.source_column("predicted_at")]
    if naive_utc:
        start = start and start.replace(tzinfo=None)
        end = end.replace(tzinfo=None)
    if start is not None:
        query = query.where(time > start)
    return query.where(time <= end)


def read_predictions(engine: Engine, audit: Audit, start: datetime | None, end: datetime):
    """The audit window as a frame with canonical columns, as the source holds them.

    An empty window is an error that says whether the model has predictions at all.
    """
    table = reflect_source(engine, audit.source)
    query = source_query(table, audit, start, end, naive_utc=engine.dialect.name == "sqlite")
    with engine.connect() as connection:
        frame = pd.read_sql(query, connection)
        if frame.empty:
            raise EmptyWindow(empty_window_message(connection, table, audit, start, end))
    return frame


def empty_window_message(connection, table: Table, audit: Audit, start, end) -> str:
    """Why a window is empty: an unknown model (naming the known ones) or no rows in the window."""
    window = f"window ({start or '-inf'}, {end}]"
    column = audit.source_column("model_id")
    if column not in table.c:
        return f"no predictions in {audit.source!r} for {window}"
    models = connection.execute(select(table.c[column]).distinct().limit(20)).scalars().all()
    if audit.model_id not in models:
        return f"unknown model {audit.model_id!r}: {audit.source!r} holds predictions of {sorted(map(str, models))}"
    return f"no predictions of model {audit.model_id!r} in {audit.source!r} for {window}"


def row_hash_sum(frame: pd.DataFrame) -> int:
    """Sum (mod 2^64) of the rows' hashes: order-independent and additive over chunks."""
    hashes = pd.util.hash_pandas_object(frame.astype(str), index=False).to_numpy(np.uint64)
    return int(hashes.sum(dtype=np.uint64))


def fingerprint(frame: pd.DataFrame | None, hash_sum: int = 0, rows: int = 0) -> str:
    """SHA-256 of the row count and the sum of row hashes: equal inputs (in any order, in any
    chunks) give equal fingerprints. Pass a frame, or a streamed (hash_sum, rows) pair."""
    if frame is not None:
        hash_sum, rows = row_hash_sum(frame), len(frame)
    return hashlib.sha256(f"{rows}:{hash_sum}".encode()).hexdigest()
