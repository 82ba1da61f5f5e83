"""Scan: reduce an audit window of N prediction rows to validated cells in bounded memory.

A scan returns the window's *cells*: one row per distinct (attributes, y_true, y_pred) with its
number of valid predictions ``n`` (y_true NaN where the outcome is unknown), every invalid row
quarantined with its reason, and the row accounting. Counts per group and intersection are a sum
over cells (tasks.counts.group_counts). Three modes:

- ``memory``: read the window whole, validate it with the Pandera schema, aggregate.

- ``stream``: read the window in chunks (a server-side cursor), validate each chunk with the same
  Pandera schema, quarantine its invalid rows, and fold its group counts into running sums. Memory
  holds one chunk, the counts and the quarantine, whatever the number of rows. Prediction ids
  repeated across chunks are found first by one GROUP BY in the database; the first occurrence is
  kept, as in memory.
- ``pushdown`` (for trusted or pre-validated sources): one GROUP BY in the database over the finest
  combination of all attributes and (y_true, y_pred), from which every attribute and intersection
  is summed (one scan on any dialect, SQLite included; a GROUPING SETS query would scan no less).
  The schema's rules are pushed down as SQL predicates; the rows that break one, or share a
  prediction id, are few and are fetched and put through the same Pandera validation, so nothing
  invalid is counted and nothing is lost.

All three give the same cells, quarantine and accounting on the same data (tests/test_scan.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

import pandas as pd
from biasaudit.db.source import (
    EmptyWindow,
    empty_window_message,
    read_predictions,
    reflect_source,
    row_hash_sum,
    source_query,
)
from biasaudit.db.source import fingerprint as frame_fingerprint
from biasaudit.schemas.config import Audit
from biasaudit.schemas.frames import CLOCK_SKEW
from biasaudit.schemas.quarantine import QUARANTINE_COLUMNS, split_valid
from sqlalchemy import and_, case, func, inspect, literal, not_, or_, select

OUTCOMES = ["y_true", "y_pred"]


@dataclass(frozen=True)
class Scanned:
    """What a scan leaves of the window: cells, quarantine, and the row accounting."""

    cells: pd.DataFrame
    quarantine: pd.DataFrame
    rows_read: int
    rows_valid: int
    rows_unlabelled: int
    fingerprint: str


def cells_of(valid: pd.DataFrame, attributes: list[str]) -> pd.DataFrame:
    """Valid rows (or weighted cells with a column ``n``) summed per (attributes, y_true, y_pred)."""
    keys = [*attributes, *OUTCOMES]
    weight = valid["n"] if "n" in valid else pd.Series(1, index=valid.index, dtype="int64")
    frame = valid[keys].astype({a: str for a in attributes}).assign(
        y_true=pd.to_numeric(valid["y_true"].astype(object)).astype("float64"),
        y_pred=pd.to_numeric(valid["y_pred"].astype(object)).astype("int64"),
        n=weight.astype("int64"),
    )
    return frame.groupby(keys, dropna=False, sort=True, as_index=False)["n"].sum()


def memory_cells(engine, audit: Audit, start, end, now: datetime) -> Scanned:
    """Cells of the window read whole and validated in memory."""
    frame = read_predictions(engine, audit, start, end)
    valid, quarantine = split_valid(frame, audit.attributes, now)
    return Scanned(
        cells=cells_of(valid, audit.attributes),
        quarantine=quarantine,
        rows_read=len(frame),
        rows_valid=len(valid),
        rows_unlabelled=int(valid["y_true"].isna().sum()),
        fingerprint=frame_fingerprint(frame),
    )


def _window(engine, audit: Audit, start, end):
    table = reflect_source(engine, audit.source)
    query = source_query(table, audit, start, end, naive_utc=engine.dialect.name == "sqlite")
    return table, query.subquery("window")


def ids_are_unique(connection, table, audit: Audit) -> bool:
    """Whether a primary key or unique constraint/index of the source guarantees unique prediction
    ids within a model (then no duplicate scan is needed)."""
    inspector = inspect(connection)
    schema = table.schema
    ident = audit.source_column("prediction_id")
    allowed = {ident, audit.source_column("model_id")}
    keys = [inspector.get_pk_constraint(table.name, schema).get("constrained_columns") or []]
    keys += [u["column_names"] for u in inspector.get_unique_constraints(table.name, schema)]
    keys += [
        i["column_names"] for i in inspector.get_indexes(table.name, schema) if i.get("unique")
    ]
    return any(key and ident in key and set(key) <= allowed for key in keys)


def _duplicated_ids(connection, window) -> set:
    query = select(window.c.prediction_id).group_by(window.c.prediction_id).having(func.count() > 1)
    return set(connection.execute(query).scalars())


def stream_cells(engine, audit: Audit, start, end, now: datetime, chunk_rows: int) -> Scanned:
    """Cells of the window read in chunks of ``chunk_rows``, validated chunk by chunk."""
    table, window = _window(engine, audit, start, end)
    parts, quarantines = [], []
    rows = valid_rows = unlabelled = 0
    hash_sum = 0
    seen: set = set()
    with engine.connect() as connection:
        unique = ids_are_unique(connection, table, audit)
        duplicated = set() if unique else _duplicated_ids(connection, window)
        streaming = connection.execution_options(stream_results=True, yield_per=chunk_rows)
        for chunk in pd.read_sql(select(window), streaming, chunksize=chunk_rows):
            hash_sum = (hash_sum + row_hash_sum(chunk)) % 2**64
            valid, quarantine = split_valid(chunk, audit.attributes, now)
            repeated = valid["prediction_id"].isin(seen)  # first occurrence was in an earlier chunk
            if repeated.any():
                quarantine = pd.concat(
                    [quarantine, _duplicates(valid[repeated])], ignore_index=True
                )
                valid = valid[~repeated]
            seen.update(set(valid["prediction_id"]) & duplicated)
            quarantine["row_number"] = quarantine["row_number"] + rows
            quarantines.append(quarantine)
            parts.append(cells_of(valid, audit.attributes))
            valid_rows += len(valid)
            unlabelled += int(valid["y_true"].isna().sum())
            rows += len(chunk)
        if rows == 0:
            raise EmptyWindow(empty_window_message(connection, table, audit, start, end))
    return Scanned(
        cells=cells_of(pd.concat(parts, ignore_index=True), audit.attributes),
        quarantine=pd.concat(quarantines, ignore_index=True),
        rows_read=rows,
        rows_valid=valid_rows,
        rows_unlabelled=unlabelled,
        fingerprint=frame_fingerprint(None, hash_sum, rows),
    )


def _duplicates(rows: pd.DataFrame) -> pd.DataFrame:
    """Quarantine records for repeats of a prediction id already accepted."""
    records = json.loads(rows.to_json(orient="records", date_format="iso"))
    return pd.DataFrame(
        {
            "row_number": rows.index.to_numpy(),
            "row_ref": rows["prediction_id"].astype(str).to_numpy(),
            "column_name": "prediction_id",
            "value": rows["prediction_id"].astype(str).to_numpy(),
            "rule": "field_uniqueness",
            "row": records,
        },
        columns=QUARANTINE_COLUMNS,
    )


def _valid_predicate(window, audit: Audit, now: datetime, naive: bool):
    """The predictions schema's rules as one SQL condition (schemas.frames.predictions_schema)."""
    c = window.c
    latest = now + CLOCK_SKEW
    rules = [
        c.prediction_id.is_not(None),
        func.length(func.trim(c.prediction_id)) > 0,
        c.model_id.is_not(None),
        c.predicted_at.is_not(None),
        c.predicted_at <= (latest.replace(tzinfo=None) if naive else latest),
        c.y_pred.in_([0, 1]),
        or_(c.y_true.is_(None), c.y_true.in_([0, 1])),
        or_(c.score.is_(None), and_(c.score >= 0, c.score <= 1)),
    ]
    for attribute in audit.attributes:
        rules += [c[attribute].is_not(None), func.length(func.trim(c[attribute])) > 0]
    return and_(*rules)


def pushdown_cells(engine, audit: Audit, start, end, now: datetime) -> Scanned:
    """Cells of the window from one GROUP BY in the database, invalid rows quarantined."""
    table, window = _window(engine, audit, start, end)
    naive = engine.dialect.name == "sqlite"
    valid = _valid_predicate(window, audit, now, naive)
    keys = [window.c[a] for a in audit.attributes] + [window.c.y_true, window.c.y_pred]
    with engine.connect() as connection:
        unique = ids_are_unique(connection, table, audit)
        duplicated = set() if unique else _duplicated_ids(connection, window)
        clean = and_(valid, not_(window.c.prediction_id.in_(duplicated))) if duplicated else valid
        ok = case((clean, 1), else_=0).label("ok")  # a rule that is NULL (a NULL value) fails
        grouped = pd.read_sql(
            select(*keys, ok, func.count().label("n")).group_by(*keys, ok), connection
        )
        rows = int(grouped["n"].sum())
        if not rows:
            raise EmptyWindow(empty_window_message(connection, table, audit, start, end))
        suspect = or_(not_(clean), clean.is_(None))
        # Only when some rows failed is the table read again, for those rows alone.
        needed = (grouped["ok"] == 0).any()
        rest = pd.read_sql(select(window).where(suspect if needed else literal(False)), connection)
    grouped = grouped[grouped["ok"] == 1].drop(columns="ok")
    accepted, quarantine = split_valid(rest, audit.attributes, now)
    grouped = grouped.astype({a: str for a in audit.attributes})
    parts = [cells_of(grouped, audit.attributes), cells_of(accepted, audit.attributes)]
    cells = cells_of(pd.concat(parts, ignore_index=True), audit.attributes)
    digest = hashlib.sha256(cells.to_csv(index=False).encode())
    digest.update(quarantine.drop(columns="row").to_csv(index=False).encode())
    unknown = grouped["y_true"].isna()
    return Scanned(
        cells=cells,
        quarantine=quarantine,
        rows_read=int(rows),
        rows_valid=int(grouped["n"].sum()) + len(accepted),
        rows_unlabelled=int(grouped.loc[unknown, "n"].sum() + accepted["y_true"].isna().sum()),
        fingerprint=digest.hexdigest(),
    )


def scan_window(engine, audit: Audit, start, end, now: datetime) -> Scanned:
    """The configured scan (``audit.scan.mode``: memory, stream or pushdown) of the window."""
    if audit.scan.mode == "pushdown":
        return pushdown_cells(engine, audit, start, end, now)
    if audit.scan.mode == "stream":
        return stream_cells(engine, audit, start, end, now, audit.scan.chunk_rows)
    return memory_cells(engine, audit, start, end, now)
