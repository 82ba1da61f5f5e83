"""Stream mode: read an audit window in Arrow batches and validate them vectorised, in bounded memory.

The window's SELECT (db.sources.window.Window.query) is read

- through Arrow where the source has a reader: PostgreSQL with ADBC (``adbc-driver-postgresql``,
  binary COPY; the query's values quoted into it by psycopg's own client-side binding, since COPY
  takes no parameters), DuckDB with its own Arrow reader (bound parameters);
- else (MariaDB/MySQL, SQLite, or the driver not installed) through the SQLAlchemy server-side
  cursor, as driver tuples. SQLite stays there: a SQLite column may hold values of several types,
  which the ADBC SQLite driver turns into text or rejects mid-stream.

Above the reader one code path: each batch of ``chunk_rows`` becomes a typed frame (text, nullable
integers and booleans, floats, UTC timestamps; other types as the Python values a driver returns)
on which the Pandera predictions schema, whose checks are vectorised for these dtypes, is the
judge. Rows it accepts are folded into counts at once; the rows it rejects are judged again, as
the driver's Python values, by ``split_valid`` for their quarantine records, so these are the same
as in the other modes. Rows whose prediction id repeats in the window (one GROUP BY first) are kept
aside and judged together at the end, so the first occurrence in read order is kept, as in memory.
The duplicate check and the rows read one snapshot (db.engine.one_snapshot; ADBC's connection
imports the scan's), so rows written meanwhile reach neither.

Memory holds one batch, the counts, the quarantine and the rows of repeated ids; with a decision
score, its counts per distinct value too (for the AUC of the score itself), as many rows as the
window has distinct scores per group.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from biasaudit.db.engine import STATEMENT_TIMEOUT_ENV, one_snapshot
from biasaudit.db.sources.catalogue import source_engine
from biasaudit.db.sources.cells import (
    OUTCOMES,
    Scanned,
    arrival_counts,
    cells_of,
    valid_score_counts,
    window_and_duplicates,
    window_score_bins,
    window_score_median,
)
from biasaudit.db.sources.fingerprints import fingerprint, row_hash_sum
from biasaudit.db.sources.read import EmptyWindow, empty_window_message, read_chunks
from biasaudit.schemas.config import Audit
from biasaudit.schemas.frames import as_binary, as_number, is_nan, text_of
from biasaudit.schemas.names import StoreLimits
from biasaudit.schemas.quarantine import QUARANTINE_COLUMNS, failures, split_valid
from biasaudit.schemas.score_bins import summed

# Batches' score counts (one row per group and distinct score value: as many as the window's
# distinct scores) are summed into one frame every this many batches.
SCORE_FOLD = 16
log = logging.getLogger(__name__)
Chunk: TypeAlias = "pa.RecordBatch | pd.DataFrame"  # Arrow, or driver values (cursor)


def _rebatched(batches: Iterator[pa.RecordBatch], chunk_rows: int) -> Iterator[pa.RecordBatch]:
    """Batches of exactly ``chunk_rows`` rows (the last one fewer), whatever the reader's size."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        pending.append(batch)
        held += batch.num_rows
        while held >= chunk_rows:
            whole = pa.Table.from_batches(pending).combine_chunks().to_batches()[0]
            yield whole.slice(0, chunk_rows)
            rest = whole.slice(chunk_rows)
            pending, held = ([rest] if rest.num_rows else []), rest.num_rows
    if held:
        yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]


def _read_ahead(
    batches: Iterator[pa.RecordBatch], deadline: float | None
) -> Iterator[pa.RecordBatch]:
    """The batches, the next one read by a thread (the driver releases the GIL) while the caller
    works on the current one: two batches in memory at most. A batch that does not come within
    ``deadline`` seconds (a server gone silent, which TCP keepalives do not notice) fails the
    scan with OperationalError; the reader, a daemon thread, is left to end when its connection
    does."""
    asks: queue.SimpleQueue[bool] = queue.SimpleQueue()
    answers: queue.SimpleQueue[tuple[pa.RecordBatch | None, Exception | None]]
    answers = queue.SimpleQueue()

    def reader() -> None:
        while asks.get():
            try:
                answers.put((next(batches, None), None))
            except Exception as error:  # noqa: BLE001 - re-raised in the caller's thread
                answers.put((None, error))
                return

    threading.Thread(target=reader, name="stream-reader", daemon=True).start()
    try:
        while True:
            asks.put(True)
            try:
                batch, error = answers.get(timeout=deadline)
            except queue.Empty:
                message = f"nothing received for {deadline:g} s ({STATEMENT_TIMEOUT_ENV} + 1 s)"
                raise OperationalError("stream scan", None, TimeoutError(message)) from None
            if error is not None:
                raise error
            if batch is None:
                return
            yield batch
    finally:
        asks.put(False)


def read_batches(connection: Connection, query, chunk_rows: int) -> Iterator[Chunk]:
    """The query's rows in chunks of at most ``chunk_rows``: Arrow record batches where the
    source's engine has an Arrow reader (SourceEngine.arrow_batches), else frames of driver
    values (db.sources.read.read_chunks)."""
    batches, deadline = source_engine(connection).arrow_batches(connection, query, chunk_rows)
    if batches is None:
        return read_chunks(connection, query, chunk_rows)
    return _read_ahead(_rebatched(batches, chunk_rows), deadline)


def _driver_values(column: pa.Array) -> list:
    """A column's values as the SQLAlchemy driver returns them (PostgreSQL numeric as Decimal,
    JSON parsed)."""
    values = column.to_pylist()
    if isinstance(column.type, pa.ExtensionType):
        name = getattr(column.type, "type_name", None) or column.type.extension_name
        if name == "numeric":
            return [None if v is None else Decimal(v) for v in values]
        if name == "arrow.json":
            return [None if v is None else json.loads(v) for v in values]
    return values


def object_frame(chunk: Chunk) -> pd.DataFrame:
    """The chunk as one object column of driver values per column (db.sources.read.rows_frame)."""
    if isinstance(chunk, pd.DataFrame):
        return chunk
    return pd.DataFrame(
        {
            name: pd.Series(_driver_values(column), dtype=object)
            for name, column in zip(chunk.schema.names, chunk.columns)
        }
    )


def _typed_column(column: pa.Array) -> pd.Series:
    """One Arrow column as the pandas dtype the schema's checks read vectorised."""
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pd.Series(column, dtype=pd.StringDtype("pyarrow"))
    if pa.types.is_integer(kind) and kind != pa.uint64():
        return column.cast(pa.int64()).to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    if pa.types.is_boolean(kind):
        return column.to_pandas(types_mapper={pa.bool_(): pd.BooleanDtype()}.get)
    if pa.types.is_floating(kind):
        if pc.any(pc.is_nan(column)).as_py():  # pandas would read NaN as missing: keep it NaN
            return pd.Series(_driver_values(column), dtype=object)
        return column.cast(pa.float64()).to_pandas()
    if pa.types.is_timestamp(kind):
        moments = column.cast(pa.timestamp("us", "UTC" if kind.tz else None))
        return moments.to_pandas()
    return pd.Series(_driver_values(column), dtype=object)


# Dtypes for object columns of driver values that hold one kind of value.
HOMOGENEOUS = {
    "string": pd.StringDtype("pyarrow"),
    "integer": pd.Int64Dtype(),
    "floating": np.dtype("float64"),
    "boolean": pd.BooleanDtype(),
}


def _typed_objects(column: pd.Series) -> pd.Series:
    """An object column of driver values as a typed column where all values are of one kind
    (Python ints beyond 64 bits, mixed and other kinds stay objects)."""
    dtype = HOMOGENEOUS.get(pd.api.types.infer_dtype(column, skipna=True))
    if dtype is None or (dtype == np.float64 and is_nan(column).any()):  # NaN is not missing
        return column
    try:
        return column.astype(dtype)
    except OverflowError:
        return column


def typed_frame(chunk: Chunk) -> pd.DataFrame:
    """The chunk with typed columns (from Arrow, or from driver values of one kind)."""
    if isinstance(chunk, pd.DataFrame):
        return chunk.apply(_typed_objects)
    return pd.DataFrame(
        {name: _typed_column(column) for name, column in zip(chunk.schema.names, chunk.columns)}
    )


def _rows(chunk: Chunk, positions: np.ndarray) -> pd.DataFrame:
    """Driver values of the chunk's rows at ``positions``."""
    if isinstance(chunk, pd.DataFrame):
        return chunk.iloc[positions].reset_index(drop=True)
    return object_frame(chunk.take(pa.array(positions, pa.int64())))


def _accepted_rows(typed: pd.DataFrame, audit: Audit) -> pd.DataFrame:
    """Rows the schema accepted as split_valid leaves them: attributes as canonical text, labels
    and decisions as 0/1, the decision's score as a number."""
    frame = pd.DataFrame(
        {a: text_of(typed[a]).astype(str) for a in audit.attributes}, index=typed.index
    ).assign(y_true=as_binary(typed["y_true"]))
    if audit.decision:
        frame["decision_score"] = as_number(typed["decision_score"])
    else:
        frame["y_pred"] = as_binary(typed["y_pred"]).astype("int8")
    return frame


def _set_aside(ids: pd.Series, duplicated: list) -> np.ndarray:
    """Rows whose prediction id repeats in the window, compared by text (a superset at worst,
    which only sets more rows aside to be judged together)."""
    if not duplicated:
        return np.zeros(len(ids), dtype=bool)
    texts = {str(d) for d in duplicated if d is not None}
    return (ids.notna() & text_of(ids).isin(texts)).to_numpy(dtype=bool)


def stream_cells(
    engine,
    audit: Audit,
    start,
    end,
    now: datetime,
    chunk_rows: int,
    store: StoreLimits | None = None,
) -> Scanned:
    """Cells of the window read in batches of ``chunk_rows``, validated batch by batch (with a
    result ``store``, its limits on group names too: schemas.quarantine.store_failures)."""
    decision = audit.decision is not None
    intersections = audit.intersections
    parts, quarantines, repeated, repeated_numbers, scores = [], [], [], [], []
    rows = hash_sum = 0
    with one_snapshot(engine) as connection:
        window, duplicated = window_and_duplicates(connection, audit, start, end, now)
        bins = window_score_bins(connection, window, start, end, now) if decision else None
        median, sample = (
            window_score_median(connection, window, start, end, now) if decision else (np.nan, 0)
        )

        def count(valid: pd.DataFrame) -> None:
            parts.append(cells_of(valid, audit))
            if bins is not None:  # per distinct value, folded as they come (SCORE_FOLD)
                scores.append(valid_score_counts(valid, audit, bins, median))
                if len(scores) >= SCORE_FOLD:
                    scores[:] = [summed(scores)]

        for chunk in read_batches(connection, window.query(start, end, now), chunk_rows):
            typed = typed_frame(chunk)
            hash_sum = (hash_sum + row_hash_sum(typed)) % 2**64
            aside = _set_aside(typed["prediction_id"], duplicated)
            if aside.any():
                repeated.append(_rows(chunk, np.flatnonzero(aside)))
                repeated_numbers.append(rows + np.flatnonzero(aside))
            places = np.flatnonzero(~aside)
            judged = typed.iloc[places].reset_index(drop=True)
            rejected = np.zeros(len(judged), dtype=bool)
            found = failures(
                judged, audit.attributes, now, decision, intersections=intersections, store=store
            )
            rejected[found["index"].astype("int64").to_numpy()] = True
            count(_accepted_rows(judged[~rejected], audit))
            if rejected.any():
                positions = places[rejected]
                valid, quarantine = split_valid(
                    _rows(chunk, positions),
                    audit.attributes,
                    now,
                    decision,
                    rows + positions,
                    intersections=intersections,
                    store=store,
                )
                count(valid)
                quarantines.append(quarantine)
            rows += len(typed)
        if rows == 0:
            raise EmptyWindow(empty_window_message(connection, window, start, end, now))
        arrival = arrival_counts(connection, window, start, end, now, duplicated)
    if repeated:
        valid, quarantine = split_valid(
            pd.concat(repeated, ignore_index=True),
            audit.attributes,
            now,
            decision,
            np.concatenate(repeated_numbers),
            intersections=intersections,
            store=store,
        )
        count(valid)
        quarantines.append(quarantine)
    keys = [*audit.attributes, *OUTCOMES]
    cells = pd.concat(parts, ignore_index=True)
    cells = cells.groupby(keys, dropna=False, sort=True, as_index=False)["n"].sum()
    quarantine = (
        pd.concat(quarantines, ignore_index=True)
        if quarantines
        else pd.DataFrame(columns=QUARANTINE_COLUMNS)
    )
    return Scanned(
        cells,
        quarantine,
        rows_read=rows,
        rows_valid=int(cells["n"].sum()),
        rows_unlabelled=int(cells.loc[cells["y_true"].isna(), "n"].sum()),
        fingerprint=fingerprint(None, hash_sum, rows),
        score_counts=summed(scores) if decision else None,
        score_bins=bins,
        score_median=median,
        scores_in_window=sample,
        arrival=arrival,
    )
