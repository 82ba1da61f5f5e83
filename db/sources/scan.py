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

import hashlib
import os
from datetime import datetime

import numpy as np
import pandas as pd
from sqlalchemy import and_, case, literal, not_, or_, select

from biasaudit.db.engine import one_snapshot
from biasaudit.db.sources.cells import (
    OUTCOMES,
    Scanned,
    arrival_counts,
    cells_of,
    decision_expression,
    score_columns,
    score_expression,
    valid_score_counts,
    window_and_duplicates,
    window_score_bins,
    window_score_median,
)
from biasaudit.db.sources.engines.base import floor_of
from biasaudit.db.sources.fingerprints import fingerprint as frame_fingerprint
from biasaudit.db.sources.read import (
    EmptyWindow,
    empty_window_message,
    read_predictions,
    rows_frame,
)
from biasaudit.db.sources.stream import stream_cells
from biasaudit.db.sources.window import Window, window_of
from biasaudit.schemas.config import Audit
from biasaudit.schemas.frames import as_binary, canonical_text, non_empty_text
from biasaudit.schemas.names import StoreLimits
from biasaudit.schemas.quarantine import QUARANTINE_COLUMNS, split_valid, store_failures
from biasaudit.schemas.score_bins import ScoreBins, bin_of, score_counts, summed

# Where the push-down enforces each rule of the predictions schema (schemas.frames, the one judge):
# "row" in the per-row condition (db.sources.window.Window.row_ok, left out where the catalogue or
# the window filter guarantees it), "key" on the grouped keys (_valid_keys), "ids" by the duplicate
# scan or a unique key. "attribute" stands for every attribute column. A schema rule missing here
# fails tests/test_pushdown_passes.py, so the SQL cannot silently fall behind the schema.
PUSHDOWN_RULES = {
    "prediction_id": {"not_nullable": "row", "non_empty": "row", "field_uniqueness": "ids"},
    "model_id": {"not_nullable": "row"},
    "predicted_at": {
        "not_nullable": "row",
        "timestamp": "row",
        "plausible_timestamp": "row",
        "not_in_future": "row",
    },
    "y_true": {"binary": "key"},
    "y_pred": {"not_nullable": "key", "binary": "key"},
    "score": {"not_nan": "row", "is_number": "row", "in_unit_interval": "row"},
    "decision_score": {"not_nullable": "row", "not_nan": "row", "finite_number": "row"},
    "attribute": {"not_nullable": "key", "non_empty": "key"},
}
# Bad key groups fetched per query (an OR of this many conjunctions).
FETCH_GROUPS = 200


def _split(frame: pd.DataFrame, audit: Audit, now: datetime, store: StoreLimits | None):
    return split_valid(
        frame,
        audit.attributes,
        now,
        decision=audit.decision is not None,
        intersections=audit.intersections,
        store=store,
    )


def memory_cells(
    engine, audit: Audit, start, end, now: datetime, store: StoreLimits | None = None
) -> Scanned:
    """Cells of the window read whole and validated in memory (with a result ``store``, rows
    with a group name it cannot hold quarantined: schemas.quarantine.store_failures)."""
    frame = read_predictions(engine, audit, start, end, now)
    valid, quarantine = _split(frame, audit, now, store)
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


def _bin_expression(window: Window, edges):
    """The lower edge of the score's bin (schemas.score_bins.bin_of) in SQL: a CASE from the
    highest edge down, the lowest edge where no other applies."""
    score = score_expression(window)
    if len(edges) < 2:
        return literal(float(edges[0]) if len(edges) else 0.0)
    whens = [(score >= literal(float(e)), literal(float(e))) for e in edges[:0:-1]]
    return case(*whens, else_=literal(float(edges[0])))


def _cell_expression(window: Window, bins: ScoreBins):
    """The score's cell in its bin (schemas.score_bins.cell_index) in SQL: floor((score - edge)
    / step) with the bin's edge and step, in the same order of operations; 0 by value."""
    score = score_expression(window)
    pairs = [(float(e), float(w)) for e, w in zip(bins.edges, bins.steps)]
    if not any(w > 0 for _, w in pairs):
        return literal(0)
    whens = [
        (score >= literal(e), floor_of((score - literal(e)) / literal(w))) for e, w in pairs[:0:-1]
    ]
    first, width = pairs[0]
    return case(*whens, else_=floor_of((score - literal(first)) / literal(width)))


def _valid_keys(grouped: pd.DataFrame, audit: Audit, store: StoreLimits | None) -> pd.Series:
    """Which grouped keys the Pandera rules accept: the checks of the predictions schema
    (schemas.frames: non_empty_text, as_binary) on each distinct key instead of each row, and
    the group names the result ``store`` can hold (schemas.quarantine.store_failures)."""
    ok = pd.Series(True, index=grouped.index)
    for name in audit.attributes:
        ok &= non_empty_text(grouped[f"k_{name}"]).to_numpy(dtype=bool)
    if store is not None:
        names = grouped[[f"k_{a}" for a in audit.attributes]].set_axis(audit.attributes, axis=1)
        unstorable = store_failures(names, audit.attributes, audit.intersections, store)
        ok.iloc[unstorable["index"].astype("int64").to_numpy()] = False
    truth = grouped["k_y_true"]
    ok &= truth.isna() | as_binary(truth).notna()
    if not audit.decision:
        ok &= as_binary(grouped["k_y_pred"]).notna()
    return ok


def _marker(value) -> tuple:
    """A hashable identity of a driver value (NaN equal to itself, 1 distinct from '1')."""
    if isinstance(value, float) and np.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, repr(value))


def pushdown_cells(
    engine, audit: Audit, start, end, now: datetime, store: StoreLimits | None = None
) -> Scanned:
    """Cells of the window from one GROUP BY in the database, invalid rows quarantined.

    One pass counts each key's rows and, as a conditional sum, those a per-row rule does not
    clear (``suspect``); the key rules run on the grouped keys. Only when a key is invalid or a
    row suspect are those rows read again and judged by the Pandera schema. Every statement that
    reads rows reads one snapshot (db.engine.one_snapshot): a label arriving between two of them
    changes nothing.

    Its input fingerprint covers the cells (rows per attributes, y_true and y_pred) and the
    quarantine records with their whole rows, in any order: they determine the run's counts,
    statistics and quarantine. A change that leaves them equal (a valid row's prediction id,
    timestamp or score changed, or moved to another valid row) is unchanged input; a row hash in
    the GROUP BY would see it, at 20-90% of the scan's time (benchmarks/README.md)."""
    names = [*audit.attributes, *OUTCOMES] + (["score_bin", "score_cell"] if audit.decision else [])
    with one_snapshot(engine) as connection:
        window, duplicated = window_and_duplicates(connection, audit, start, end, now)
        ok, in_window = window.row_ok(now), window.where(start, end, now)
        if duplicated:
            ok = and_(ok, not_(window.key("prediction_id").in_(duplicated)))
        flag = case((ok, 1), else_=0)  # a rule that is NULL (a NULL value) fails
        expressions = {
            **{a: window.key(a) for a in audit.attributes},
            "y_true": window.raw["y_true"],
            "y_pred": decision_expression(window, audit),
        }
        # With a decision, the score's bin is a key; the score of the rows that pass, and
        # whether it is above the window's median, are summed.
        per_row = {}
        median, sample, bins = np.nan, 0, None
        if audit.decision:
            bins = window_score_bins(connection, window, start, end, now)
            median, sample = window_score_median(connection, window, start, end, now)
            expressions["score_bin"] = _bin_expression(window, bins.edges)
            expressions["score_cell"] = _cell_expression(window, bins)
            score = score_expression(window)
            per_row = {
                "score_sum": case((ok, score), else_=0.0),
                "above_median": case((and_(ok, score > literal(median)), 1), else_=0)
                if sample
                else literal(0),
            }
        keys = [expressions[n].label(f"k_{n}") for n in names]
        query = window.engine.grouped(keys, names, ok, per_row, in_window)
        result = connection.execute(query)
        grouped = rows_frame(result, list(result.keys()))
        rows = int(grouped["n"].sum()) if len(grouped) else 0
        if not rows:
            raise EmptyWindow(empty_window_message(connection, window, start, end, now))
        grouped = grouped.assign(
            n=grouped["n"].astype("int64"), suspect=grouped["suspect"].astype("int64")
        )
        good_keys = _valid_keys(grouped, audit, store)
        bad = grouped[~good_keys & (grouped["suspect"] < grouped["n"])]
        bad_markers = {
            tuple(_marker(v) for v in row)
            for row in bad[[f"k_{n}" for n in names]].itertuples(index=False)
        }
        any_suspect = bool(grouped["suspect"].any())
        rest = _fetch_suspects(connection, window, in_window, flag, keys, bad, names, any_suspect)
        arrival = arrival_counts(connection, window, start, end, now, duplicated)
    parts, score_parts, accepted_rows, accepted_unlabelled = [], [], 0, 0
    quarantine = pd.DataFrame(columns=QUARANTINE_COLUMNS)
    if len(rest):  # rows read again: the schema judges them
        marks = rest[[f"k_{n}" for n in names]].itertuples(index=False)
        suspect_rows = (rest["ok"] == 0).to_numpy() | np.array(
            [tuple(_marker(v) for v in row) in bad_markers for row in marks], dtype=bool
        )
        rest = rest[suspect_rows].drop(columns=[*[f"k_{n}" for n in names], "ok"])
        accepted, quarantine = _split(rest.reset_index(drop=True), audit, now, store)
        parts.append(cells_of(accepted, audit))
        if bins is not None:
            score_parts.append(valid_score_counts(accepted, audit, bins, median, cells=True))
        accepted_rows, accepted_unlabelled = len(accepted), int(accepted["y_true"].isna().sum())
    counted_cells = grouped[good_keys].rename(columns={f"k_{n}": n for n in names})
    counted_cells = counted_cells.assign(
        **{a: canonical_text(counted_cells[a]) for a in audit.attributes},
        y_true=as_binary(counted_cells["y_true"]),
        n=counted_cells["n"] - counted_cells["suspect"],
    ).drop(columns="suspect")
    counted_cells = counted_cells[counted_cells["n"] > 0]
    counted_cells = counted_cells.assign(
        y_pred=(
            counted_cells["y_pred"] if audit.decision else as_binary(counted_cells["y_pred"])
        ).astype("int64")
    )
    scores = None
    if audit.decision:
        assert bins is not None
        edge = bin_of(counted_cells["score_bin"].astype("float64").to_numpy(), bins.edges)
        step = bins.steps[np.searchsorted(bins.edges, edge)] if len(bins.edges) else 0.0
        cell = edge + counted_cells["score_cell"].astype("float64").to_numpy() * step
        binned = counted_cells.assign(
            score_bin=cell,
            score_sum=counted_cells["score_sum"]
            .astype("float64")
            .where(counted_cells["y_true"].notna(), 0.0),
            above_median=counted_cells["above_median"].astype("int64"),
        )
        counted = score_counts(
            binned, score_columns(audit), np.unique(cell), median, score="score_bin"
        )
        scores = summed([counted, *score_parts])
        counted_cells = counted_cells.drop(
            columns=["score_bin", "score_cell", "score_sum", "above_median"]
        )
    cells = cells_of(counted_cells, audit)
    if parts:  # the rows read again, summed into the counted cells
        cells = pd.concat([cells, *parts], ignore_index=True)
        cells = cells.groupby(
            [*audit.attributes, *OUTCOMES], dropna=False, sort=True, as_index=False
        )["n"].sum()
    digest = hashlib.sha256(cells.to_csv(index=False).encode())
    digest.update(_records_text(quarantine).encode())
    valid_counted = int(counted_cells["n"].sum())
    return Scanned(
        cells,
        quarantine,
        rows_read=rows,
        rows_valid=valid_counted + accepted_rows,
        rows_unlabelled=int(counted_cells.loc[counted_cells["y_true"].isna(), "n"].sum())
        + accepted_unlabelled,
        fingerprint=digest.hexdigest(),
        score_counts=scores,
        score_bins=bins,
        score_median=median,
        scores_in_window=sample,
        arrival=arrival,
    )


_RECORD_COLUMNS = ["column_name", "value", "rule", "row"]


def _records_text(quarantine: pd.DataFrame) -> str:
    """The quarantine records (each with its whole row) as CSV in a fixed order, without row
    numbers and references: a row read again has the position the database returned it at, in
    no set order (a row without an id is referred to by it)."""
    if quarantine.empty:  # the text pandas writes for no records (its line end), without its cost
        return ",".join(_RECORD_COLUMNS) + os.linesep
    records = quarantine[_RECORD_COLUMNS].astype(str)
    return records.sort_values(list(records.columns)).to_csv(index=False)


def _fetch_suspects(
    connection, window: Window, in_window, flag, keys, bad, names, any_suspect: bool
):
    """The rows that failed a per-row rule (read only if ``any_suspect``) or belong to a group
    with an invalid key, with their flag and keys (to drop rows a loose SQL key comparison
    fetched too)."""
    conditions = []
    key_of = {n: k.element for n, k in zip(names, keys)}
    for first in range(0, len(bad), FETCH_GROUPS):
        part = bad.iloc[first : first + FETCH_GROUPS]
        conditions.append(
            or_(
                *[
                    and_(
                        *[
                            key_of[n].is_(None) if v is None else key_of[n] == v
                            for n, v in zip(names, row)
                        ]
                    )
                    for row in part[[f"k_{n}" for n in names]].itertuples(index=False)
                ]
            )
        )
    columns = window.selected() + keys + [flag.label("ok")]
    frames = [pd.DataFrame(columns=[c.name for c in columns])]
    # A row is fetched once: for its failed rule, or (passing every per-row rule) for its key.
    for condition in [flag == 0] * any_suspect + [and_(flag == 1, c) for c in conditions]:
        result = connection.execute(select(*columns).where(and_(in_window, condition)))
        frames.append(rows_frame(result, list(result.keys())))
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


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
        return pd.DataFrame(columns=[*audit.attributes, *OUTCOMES, "n"])
