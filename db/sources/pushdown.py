"""Push-down mode: the window's cells from one GROUP BY in the database (db.sources.pushdown_sql),
its keys judged by the Pandera checks, the rows it could not clear read again and judged whole.
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime

import numpy as np
import pandas as pd

from biasaudit.db.engine import one_snapshot
from biasaudit.db.sources.cells import (
    OUTCOMES,
    Scanned,
    arrival_counts,
    cells_of,
    score_columns,
    split_window_rows,
    valid_score_counts,
    window_and_duplicates,
)
from biasaudit.db.sources.pushdown_sql import (
    Grouped,
    grouped_statement,
    suspects_columns,
    suspects_statements,
)
from biasaudit.db.sources.read import EmptyWindow, empty_window_message, rows_frame
from biasaudit.schemas.config import Audit
from biasaudit.schemas.frames import as_binary, canonical_text, non_empty_text
from biasaudit.schemas.names import StoreLimits
from biasaudit.schemas.quarantine import QUARANTINE_COLUMNS, store_failures
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
    the GROUP BY would see it, at a large share of the scan's time
    (benchmarks/results/fingerprint.md)."""
    with one_snapshot(engine) as connection:
        window, duplicated = window_and_duplicates(connection, audit, start, end, now)
        statement = grouped_statement(connection, window, start, end, now, duplicated)
        result = connection.execute(statement.query)
        grouped = rows_frame(result, list(result.keys()))
        rows = int(grouped["n"].sum()) if len(grouped) else 0
        if not rows:
            raise EmptyWindow(empty_window_message(connection, window, start, end, now))
        grouped = grouped.assign(
            n=grouped["n"].astype("int64"), suspect=grouped["suspect"].astype("int64")
        )
        good_keys = _valid_keys(grouped, audit, store)
        bad = grouped[~good_keys & (grouped["suspect"] < grouped["n"])]
        frames = [pd.DataFrame(columns=suspects_columns(window, statement))]
        for query in suspects_statements(window, statement, bad, bool(grouped["suspect"].any())):
            read = connection.execute(query)
            frames.append(rows_frame(read, list(read.keys())))
        rest = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        arrival = arrival_counts(connection, window, start, end, now, duplicated)
    accepted, quarantine = _judged_again(rest, bad, statement.names, audit, now, store)
    counted = _counted_cells(grouped[good_keys], statement.names, audit)
    scores = None
    if statement.bins is not None:  # the counted cells' scores, and the accepted rows'
        parts = [_binned_scores(counted, audit, statement)]
        if accepted is not None:
            bins, median = statement.bins, statement.median
            parts.append(valid_score_counts(accepted, audit, bins, median, cells=True))
        scores = summed(parts)
        counted = counted.drop(columns=["score_bin", "score_cell", "score_sum", "above_median"])
    cells = cells_of(counted, audit)
    if accepted is not None:  # the rows read again, summed into the counted cells
        cells = pd.concat([cells, cells_of(accepted, audit)], ignore_index=True)
        cells = cells.groupby(
            [*audit.attributes, *OUTCOMES], dropna=False, sort=True, as_index=False
        )["n"].sum()
    accepted_rows = 0 if accepted is None else len(accepted)
    accepted_unlabelled = 0 if accepted is None else int(accepted["y_true"].isna().sum())
    digest = hashlib.sha256(cells.to_csv(index=False).encode())
    digest.update(_records_text(quarantine).encode())
    return Scanned(
        cells,
        quarantine,
        rows_read=rows,
        rows_valid=int(counted["n"].sum()) + accepted_rows,
        rows_unlabelled=int(counted.loc[counted["y_true"].isna(), "n"].sum()) + accepted_unlabelled,
        fingerprint=digest.hexdigest(),
        score_counts=scores,
        score_bins=statement.bins,
        score_median=statement.median,
        scores_in_window=statement.sample,
        arrival=arrival,
    )


def _judged_again(
    rest: pd.DataFrame,
    bad: pd.DataFrame,
    names: list[str],
    audit: Audit,
    now: datetime,
    store: StoreLimits | None,
) -> tuple[pd.DataFrame | None, pd.DataFrame]:
    """The rows read again, judged by the Pandera schema: (accepted, quarantine); (None, no
    records) where none was read again. A row read for a bad key whose own key is none of them
    (a loose SQL comparison fetched it) is left out: it was counted."""
    if not len(rest):
        return None, pd.DataFrame(columns=QUARANTINE_COLUMNS)
    keys = [f"k_{n}" for n in names]
    bad_markers = {tuple(_marker(v) for v in row) for row in bad[keys].itertuples(index=False)}
    marks = rest[keys].itertuples(index=False)
    suspect_rows = (rest["ok"] == 0).to_numpy() | np.array(
        [tuple(_marker(v) for v in row) in bad_markers for row in marks], dtype=bool
    )
    rest = rest[suspect_rows].drop(columns=[*keys, "ok"])
    return split_window_rows(rest.reset_index(drop=True), audit, now, store)


def _counted_cells(grouped: pd.DataFrame, names: list[str], audit: Audit) -> pd.DataFrame:
    """The grouped keys that passed, as cells of the rows that cleared every per-row rule."""
    counted = grouped.rename(columns={f"k_{n}": n for n in names})
    counted = counted.assign(
        **{a: canonical_text(counted[a]) for a in audit.attributes},
        y_true=as_binary(counted["y_true"]),
        n=counted["n"] - counted["suspect"],
    ).drop(columns="suspect")
    counted = counted[counted["n"] > 0]
    return counted.assign(
        y_pred=(counted["y_pred"] if audit.decision else as_binary(counted["y_pred"])).astype(
            "int64"
        )
    )


def _binned_scores(counted: pd.DataFrame, audit: Audit, statement: Grouped) -> pd.DataFrame:
    """The score counts of the counted cells, each at its cell of the window's bins."""
    bins: ScoreBins | None = statement.bins
    assert bins is not None
    edge = bin_of(counted["score_bin"].astype("float64").to_numpy(), bins.edges)
    step = bins.steps[np.searchsorted(bins.edges, edge)] if len(bins.edges) else 0.0
    cell = edge + counted["score_cell"].astype("float64").to_numpy() * step
    binned = counted.assign(
        score_bin=cell,
        score_sum=counted["score_sum"].astype("float64").where(counted["y_true"].notna(), 0.0),
        above_median=counted["above_median"].astype("int64"),
    )
    return score_counts(
        binned, score_columns(audit), np.unique(cell), statement.median, score="score_bin"
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
