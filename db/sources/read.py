"""Reading a window's rows: as driver values, whole or in chunks, and why a window is empty.

Values are read as the database driver returns them (no pandas type guessing: an integer column
with NULLs stays integers, text ``007`` stays text); the Pandera rules (schemas.frames) judge them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pandas as pd
from sqlalchemy import Engine, func, select

from biasaudit.db.sources.catalogue import listing
from biasaudit.db.sources.window import Window, window_of
from biasaudit.schemas.config import Audit


class EmptyWindow(LookupError):
    """The audit window holds no predictions for the model (or the model has none at all)."""


def rows_frame(result, columns) -> pd.DataFrame:
    """A frame of driver values, one object column each (no dtype inference). A result is read
    whole by ``all()``: row by row, clickhouse-sqlalchemy's HTTP cursor pops each row from the
    front of its prefetched list, a time quadratic in the rows (benchmarks/results/engines.md)."""
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
            present = listing(sorted("NULL" if v is None else repr(str(v)) for v in versions))
            return (
                f"{sum(versions.values())} predictions{of_model} in {audit.source!r} for {span}, "
                f"but none of model_version {version!r}; versions present: {present}"
            )
        of_model += f" (model_version {version!r})"
    return f"no predictions{of_model} in {audit.source!r} for {span}"
