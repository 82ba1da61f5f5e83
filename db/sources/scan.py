"""Scan: reduce an audit window of N prediction rows to validated cells in bounded memory.

A scan returns the window's *cells*: one row per distinct (attributes, y_true, y_pred) with its
number of valid predictions ``n`` (y_true NaN where the outcome is unknown), every invalid row
quarantined with its reason, and the row accounting. Counts per group and intersection are a sum
over cells (tasks.counts.group_counts). Three modes:

- ``memory``: read the window whole, validate it with the Pandera schema, aggregate.
- ``stream``: read the window in Arrow batches (db.sources.stream; a server-side cursor where the
  source has no Arrow reader), validate each with the same Pandera schema, vectorised on typed columns,
  quarantine its invalid rows, and fold its counts into running sums. Memory holds one batch,
  the counts and the quarantine, whatever the number of rows. Prediction ids repeated in the
  window are found first by one GROUP BY in the database; their rows are judged together, so the
  first occurrence is kept, as in memory.
- ``pushdown``: one GROUP BY in the database over the finest combination of all attributes and
  (y_true, y_pred), counting each key's rows and, as a conditional sum, the rows a per-row rule
  (id, timestamp, scores: db.sources.window.Window.row_ok, a sound SQL condition without the rules
  the catalogue or the window already guarantee) does not clear. Attribute and label rules are
  checked by the Pandera checks themselves on the few grouped keys, and so are the result store's
  limits on group names (schemas.quarantine.store_failures). Only suspect rows and rows of invalid
  keys are read again, and judged by the whole Pandera validation: a clean table is read once,
  and nothing invalid is counted and nothing is lost.

All three give the same cells, quarantine and accounting on the same data, on PostgreSQL, SQLite,
MariaDB and DuckDB, and on ClickHouse and Spark SQL with typed timestamps and scores
(tests/test_scan.py, tests/test_hostile_sources.py, tests/test_typed_sources.py).

With a ``decision`` from a score, y_pred is whether the score reaches the audit's threshold
(decided in SQL by the push-down, in pandas otherwise), and the scan also counts the score per
(group, score value, label) for the score audit (tasks.scores): per distinct value in memory and
stream modes; the push-down adds the window's bin (db.sources.cells.window_score_bins, the same in
every mode) and the score's cell in it (schemas.score_bins.cell_index) to its GROUP BY
and sums the score of the rows that pass and how many score above the window's median
(db.sources.cells.window_score_median, for the Local Law 144 scoring rate). A floating-point score
is read as a double in every mode (SourceEngine.exact_number): a single-precision one (PostgreSQL
real, MariaDB FLOAT), which drivers return as a shorter decimal, is then read as the value SQL
compares, so a score at a bin edge or threshold falls on the same side of it in every mode.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd
from sqlalchemy import select, type_coerce
from sqlalchemy.types import NullType

from biasaudit.db.engine import one_snapshot
from biasaudit.db.sources.cells import (
    OUTCOMES,
    Scanned,
    arrival_counts,
    cells_of,
    split_window_rows,
    valid_score_counts,
    window_and_duplicates,
    window_score_bins,
    window_score_median,
)
from biasaudit.db.sources.fingerprints import fingerprint as frame_fingerprint
from biasaudit.db.sources.pushdown import pushdown_cells
from biasaudit.db.sources.read import (
    EmptyWindow,
    read_predictions,
    rows_frame,
)
from biasaudit.db.sources.stream import stream_cells
from biasaudit.db.sources.window import window_of
from biasaudit.schemas.config import Audit
from biasaudit.schemas.grammar import CLOCK_SKEW, EARLIEST
from biasaudit.schemas.names import StoreLimits

Windows = list[tuple[datetime | None, datetime]]


def memory_cells(
    engine, audit: Audit, start, end, now: datetime, store: StoreLimits | None = None
) -> Scanned:
    """Cells of the window read whole and validated in memory (with a result ``store``, rows
    with a group name it cannot hold quarantined: schemas.quarantine.store_failures)."""
    frame = read_predictions(engine, audit, start, end, now)
    valid, quarantine = split_window_rows(frame, audit, now, store)
    scores, bins, median, sample, arrival = None, None, np.nan, 0, None
    with one_snapshot(engine) as connection:  # the score's bins and the labels' arrival
        window = window_of(connection, audit)
        if audit.decision:
            bins = window_score_bins(connection, window, start, end, now)
            median, sample = window_score_median(connection, window, start, end, now)
        if window.arrival is not None:
            window, duplicated = window_and_duplicates(connection, audit, start, end, now)
            arrival = arrival_counts(connection, window, start, end, now, duplicated)
    if bins is not None:
        scores = valid_score_counts(valid, audit, bins, median)
    return Scanned(
        cells_of(valid, audit),
        quarantine,
        rows_read=len(frame),
        rows_valid=len(valid),
        rows_unlabelled=int(valid["y_true"].isna().sum()),
        fingerprint=frame_fingerprint(frame),
        score_counts=scores,
        score_bins=bins,
        score_median=median,
        scores_in_window=sample,
        arrival=arrival,
    )


def scan_window(
    engine, audit: Audit, start, end, now: datetime, store: StoreLimits | None = None
) -> Scanned:
    """The configured scan (``audit.scan.mode``: memory, stream or pushdown) of the window; with
    the result ``store``'s limits, rows with a group name it cannot hold are quarantined."""
    if audit.scan.mode == "pushdown":
        return pushdown_cells(engine, audit, start, end, now, store)
    if audit.scan.mode == "stream":
        return stream_cells(engine, audit, start, end, now, audit.scan.chunk_rows, store)
    return memory_cells(engine, audit, start, end, now, store)


def valid_cells(
    engine, audit: Audit, start, end, now: datetime, store: StoreLimits | None = None
) -> pd.DataFrame:
    """The accepted cells (attributes, y_true, y_pred, n) of the configured scan of a window, for
    a part of the history that may hold no predictions (a monitored run's increment): an empty
    window gives no cells instead of EmptyWindow."""
    try:
        return scan_window(engine, audit, start, end, now, store).cells
    except EmptyWindow:
        return _no_cells(audit)


def _no_cells(audit: Audit) -> pd.DataFrame:
    return pd.DataFrame(columns=[*audit.attributes, *OUTCOMES, "n"])


def windows_cells(
    engine, audit: Audit, windows: Windows, now: datetime, store: StoreLimits | None = None
) -> list[pd.DataFrame]:
    """valid_cells of each window, the rows of their union read once (memory mode): each window
    takes the rows Window.where puts in it, decided on the value SQL compares (the engine's
    filter_time of each row and its bound of each end, read with the rows and ranked together,
    so SQLite's milliseconds or a zone compare as SQL compares them): in (start, end], or with
    no plausible timestamp, or in the future at ``now``; and validates them as its own scan
    would (split_window_rows, cells_of). A backtest's nights then cost one read of the table,
    not one each (its memory: the union's rows, as one audit of them). Stream and push-down
    scans, sources with a zero date (ClickHouse) and values SQL compares but Python cannot order
    alike scan each window."""
    window = window_of(engine, audit) if windows else None
    if window is None or audit.scan.mode != "memory" or window.zero is not None:
        return [valid_cells(engine, audit, start, end, now, store) for start, end in windows]
    starts = [start for start, _ in windows if start is not None]
    first = min(starts) if len(starts) == len(windows) else None
    last = max(end for _, end in windows)
    query = window.query(first, last, now)
    ends = [EARLIEST]
    for start, end in windows:
        ends += [end, max(end, now + CLOCK_SKEW) - window.engine.margin]
        ends += [] if start is None else [start]
    if window.time is not None:
        t, aware = window.engine.filter_time(window.when, window.time)
        query = query.add_columns(type_coerce(t, NullType()).label(_MOMENT))
        bounds = [type_coerce(window.engine.bound(m, aware), NullType()) for m in ends]
    with engine.connect() as connection:
        if window.arrival is not None:  # the refusal each window's scan would raise
            window_and_duplicates(connection, audit, first, last, now)
        result = connection.execute(query)
        frame = rows_frame(result, list(result.keys()))
        if window.time is not None:
            at = dict(zip(ends, connection.execute(select(*bounds)).one()))
    if frame.empty:
        return [_no_cells(audit) for _ in windows]
    if window.time is None:  # no timestamp: every row is in every window
        return [cells_of(split_window_rows(frame, audit, now, store)[0], audit) for _ in windows]
    ranked = _ranks(frame.pop(_MOMENT).to_numpy(dtype=object), list(at.values()))
    if ranked is None:
        return [valid_cells(engine, audit, start, end, now, store) for start, end in windows]
    rank, of = ranked[0], dict(zip(at, ranked[1]))
    implausible = (rank < 0) | (rank < of[EARLIEST])
    out = []
    for start, end in windows:
        inside = (rank <= of[end]) & ((rank > of[start]) if start is not None else True)
        future = rank > of[max(end, now + CLOCK_SKEW) - window.engine.margin]
        rows = frame[inside | future | implausible]
        valid = split_window_rows(rows, audit, now, store)[0] if len(rows) else None
        out.append(_no_cells(audit) if valid is None else cells_of(valid, audit))
    return out


_MOMENT = "__moment"  # windows_cells: the timestamp SQL compares, read beside the rows


def _ranks(values: np.ndarray, bounds: list) -> tuple[np.ndarray, np.ndarray] | None:
    """Ranks of the rows' compared values (−1: NULL) and of the bounds, in one order (ties one
    rank), or None where Python cannot order them together (values of mixed types)."""
    present = pd.notna(values)
    try:
        _, inverse = np.unique(
            np.concatenate([values[present], np.array(bounds, dtype=object)]), return_inverse=True
        )
    except TypeError:
        return None
    rank = np.full(len(values), -1, "int64")
    rank[present] = inverse[: int(present.sum())]
    return rank, inverse[int(present.sum()) :]
