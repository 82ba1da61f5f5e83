"""What every scan mode shares (db.sources.scan's memory and push-down, db.sources.stream): the
cells a scan leaves, how rows become cells, and which prediction ids the window repeats."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd
from sqlalchemy import and_, case, func, literal, not_, or_, select

from biasaudit.db.sources.catalogue import SourceError, source_engine
from biasaudit.db.sources.read import rows_frame
from biasaudit.db.sources.window import Window, window_of
from biasaudit.schemas.config import Audit
from biasaudit.schemas.frames import as_binary, canonical_text, non_empty_text
from biasaudit.schemas.names import StoreLimits
from biasaudit.schemas.quarantine import split_valid
from biasaudit.schemas.score_bins import (
    MAX_DISTINCT,
    ScoreBins,
    cell_of,
    median_positions,
    quantile_positions,
    score_bins,
    score_counts,
)

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
    # Counts per (group, score value or cell, label) of the decision's score and the window's
    # score bins (schemas.score_bins), where the audit derives its decision from a score, and
    # the median of the window's finite scores (db.sources.cells.window_score_median) with their
    # number.
    score_counts: pd.DataFrame | None = None
    score_bins: ScoreBins | None = None
    score_median: float = np.nan
    scores_in_window: int = 0
    # Labelled rows per (attributes, y_true, y_pred, late) where the source has ``labelled_at``
    # (db.sources.cells.arrival_counts), for the label-completeness warnings
    # (tasks.counts.arrival_evidence).
    arrival: pd.DataFrame | None = None


def split_window_rows(frame: pd.DataFrame, audit: Audit, now: datetime, store: StoreLimits | None):
    """The window's rows as (valid, quarantine) by the predictions schema (schemas.quarantine):
    with a result ``store``'s limits, rows with a group name it cannot hold are quarantined."""
    return split_valid(
        frame,
        audit.attributes,
        now,
        decision=audit.decision is not None,
        intersections=audit.intersections,
        store=store,
    )


def input_fingerprint(scanned: Scanned) -> str:
    """The run's input fingerprint: the scan's own (its rows, or its cells and quarantine) with,
    where the audit has them, the score counts and the labels' arrival counts, which determine
    the score results and the label warnings as the cells determine the rest (a score moved
    within its decision, or a label's arrival time, changes no cell). Their counts only: a sum
    of scores (``score_sum``) differs in its last bits with the order the database or the
    chunks add it in. The scan's own where it has neither, so a run of such an audit matches its
    earlier runs."""
    parts = [p for p in (scanned.score_counts, scanned.arrival) if p is not None]
    if not parts:
        return scanned.fingerprint
    digest = hashlib.sha256(scanned.fingerprint.encode())
    for part in parts:
        counted = part.drop(columns=["score_sum"], errors="ignore")
        ordered = counted.sort_values(list(counted.columns), ignore_index=True)
        digest.update(ordered.to_csv(index=False).encode())
    return digest.hexdigest()


def cells_of(valid: pd.DataFrame, audit: Audit) -> pd.DataFrame:
    """Valid rows (or weighted cells with a column ``n``) summed per (attributes, y_true, y_pred):
    y_pred as read (or decided in SQL), else whether ``decision_score`` reaches the threshold."""
    keys = [*audit.attributes, *OUTCOMES]
    if "y_pred" in valid or audit.decision is None:
        y_pred = valid["y_pred"].astype("int64").to_numpy()
    else:
        scores = valid["decision_score"].astype("float64").to_numpy()
        y_pred = (scores >= audit.decision.threshold).astype("int64")
    weight = valid["n"] if "n" in valid else pd.Series(1, index=valid.index, dtype="int64")
    frame = valid[[*audit.attributes, "y_true"]].astype({a: str for a in audit.attributes})
    frame = frame.assign(
        y_true=valid["y_true"].astype("float64"), y_pred=y_pred, n=weight.astype("int64")
    )
    return frame.groupby(keys, dropna=False, sort=True, as_index=False)["n"].sum()


def ids_are_unique(connection, table, audit: Audit) -> bool:
    """Whether a primary key or unique constraint/index of the source guarantees unique prediction
    ids within a model (then no duplicate scan is needed)."""
    ident = audit.source_column("prediction_id")
    allowed = {ident, audit.source_column("model_id")}
    keys = source_engine(connection).unique_keys(connection, table)
    # A key unique under a looser text equality (MariaDB's default collations) is unique too.
    return any(key and ident in key and set(key) <= allowed for key in keys)


def duplicated_ids(connection, window: Window, start, end, now: datetime) -> list:
    """Prediction ids occurring more than once in the window (exact text comparison)."""
    ident = window.key("prediction_id").label("pid")
    inner = select(ident).where(window.where(start, end, now)).subquery()
    query = select(inner.c.pid).group_by(inner.c.pid).having(func.count() > 1)
    return list(connection.execute(query).scalars())


def window_and_duplicates(connection, audit: Audit, start, end, now: datetime):
    """The source's window and the prediction ids it holds more than once (none where a key of
    the source, or the user's ``scan.ids_unique``, guarantees unique ids)."""
    window = window_of(connection, audit)
    unique = audit.scan.ids_unique or ids_are_unique(connection, window.table, audit)
    if unique:
        return window, []
    refused = window.engine.duplicates_refusal(window.table, audit)
    if refused:
        raise SourceError(refused)
    return window, duplicated_ids(connection, window, start, end, now)


def score_expression(window: Window):
    """The decision's score as a double (NULL where it is no number)."""
    return window.engine.parsed_number(window.raw["decision_score"])


def window_score_bins(connection, window: Window, start, end, now: datetime) -> ScoreBins:
    """The score bins (schemas.score_bins.ScoreBins) of the window's numeric decision scores,
    found in the database: its distinct values where it has few, else order statistics by
    ORDER BY ... OFFSET, with the lowest and highest score."""
    score = score_expression(window).label("s")
    inner = select(score).where(window.where(start, end, now)).subquery()
    known = inner.c.s.is_not(None)
    distinct = connection.execute(
        select(inner.c.s).where(known).distinct().order_by(inner.c.s).limit(MAX_DISTINCT + 1)
    ).scalars()
    values = np.array([float(v) for v in distinct], dtype="float64")
    if len(values) <= MAX_DISTINCT:
        bottom, top = (values[0], values[-1]) if len(values) else (np.nan, np.nan)
        return score_bins(values, bottom, top, by_value=True)
    n, top = connection.execute(
        select(func.count(), func.max(inner.c.s)).select_from(inner).where(known)
    ).one()
    sorted_scores = select(inner.c.s).where(known).order_by(inner.c.s)
    edges = [
        float(connection.execute(sorted_scores.limit(1).offset(int(k))).scalar_one())
        for k in quantile_positions(int(n))
    ]
    unique = np.unique(np.array(edges, dtype="float64"))
    return score_bins(unique, unique[0], float(top), by_value=False)


def window_score_median(connection, window: Window, start, end, now: datetime) -> tuple[float, int]:
    """The median of the window's finite decision scores (every row read with one, accepted or
    not: the individuals scored) and their number, found in the database by ORDER BY ... OFFSET;
    NaN where there is none."""
    score = score_expression(window).label("s")
    inner = select(score).where(window.where(start, end, now)).subquery()
    finite = and_(inner.c.s >= -1e300, inner.c.s <= 1e300)  # not NULL, infinite or NaN
    n = int(connection.execute(select(func.count()).select_from(inner).where(finite)).scalar_one())
    if not n:
        return np.nan, 0
    positions = median_positions(n)
    middle = select(inner.c.s).where(finite).order_by(inner.c.s)
    values = connection.execute(middle.limit(len(positions)).offset(positions[0])).scalars()
    return float(np.mean([float(v) for v in values])), n


def score_columns(audit: Audit) -> list[list[str]]:
    """The attributes and intersections whose groups the score audit compares."""
    return [[a] for a in audit.attributes] + [list(i) for i in audit.intersections]


def valid_score_counts(
    valid: pd.DataFrame, audit: Audit, bins: ScoreBins, median: float, *, cells: bool = False
) -> pd.DataFrame:
    """Score counts of valid rows (with ``decision_score``) per distinct score value, or per
    cell of the window's ``bins`` (the push-down's resolution), with the rows above the
    window's ``median``."""
    scores = valid["decision_score"].astype("float64")
    rows = valid.assign(
        y_true=valid["y_true"].astype("float64"),
        decision_score=cell_of(scores.to_numpy(), bins) if cells else scores,
    )
    if cells:  # the score's sum stays the scores' own, for the cells' mean scores
        rows = rows.assign(score_sum=scores.where(rows["y_true"].notna(), 0.0))
        rows = rows.assign(above_median=(scores > median).astype("int64"))
    values = np.unique(rows["decision_score"].to_numpy())
    return score_counts(rows, score_columns(audit), values, median, score="decision_score")


def decision_expression(window: Window, audit: Audit):
    """y_pred as read, or 1 where the parsed decision score reaches the threshold, else 0."""
    if not audit.decision:
        return window.raw["y_pred"]
    score = score_expression(window)
    return case((score >= literal(audit.decision.threshold), 1), else_=0)


ARRIVAL_COLUMNS = ["y_true", "y_pred", "late"]


def arrival_counts(
    connection, window: Window, start, end, now: datetime, duplicated: list | None = None
) -> pd.DataFrame | None:
    """Labelled rows of the window per (attributes, y_true, y_pred, late), where the source has
    ``labelled_at`` (None otherwise): ``late`` whether the label's delay
    (db.sources.window.Window.delay) is above the median delay of the labelled rows with the same
    decision, a threshold found in the database by ORDER BY ... OFFSET. The threshold depends on
    delays only, never on outcomes, so the test of outcome x late within a group and decision
    (tasks.counts.arrival_evidence) keeps its size. One GROUP BY, the same in every scan mode, so
    the three modes agree exactly: rows the per-row rules clear (db.sources.window.Window.row_ok),
    ids not repeated in the window (``duplicated``), keys the predictions schema accepts."""
    if window.arrival is None:
        return None
    audit = window.audit
    delay = window.delay()
    decided = decision_expression(window, audit)
    truth = window.raw["y_true"]
    labelled = and_(
        window.where(start, end, now), window.row_ok(now), truth.is_not(None), delay.is_not(None)
    )
    if duplicated:
        labelled = and_(labelled, not_(window.key("prediction_id").in_(duplicated)))
    if audit.decision:
        values = {0: [0], 1: [1]}
    else:  # the decision's raw values (1, '1', 'true', ...) by the decision they mean
        raw = list(connection.execute(select(decided).where(labelled).distinct()).scalars())
        read = as_binary(pd.Series(raw, dtype=object))
        values = {d: [v for v, b in zip(raw, read, strict=True) if b == d] for d in (0, 1)}
    late = []
    for held in values.values():
        if not held:
            continue
        inner = select(delay.label("delay")).where(labelled, decided.in_(held)).subquery()
        n = int(connection.execute(select(func.count()).select_from(inner)).scalar_one())
        if not n:
            continue
        median = connection.execute(
            select(inner.c.delay).order_by(inner.c.delay).limit(1).offset((n - 1) // 2)
        ).scalar_one()
        late.append(and_(decided.in_(held), delay > literal(float(median))))
    flag = case((or_(*late), 1), else_=0) if late else literal(0)
    names = [*audit.attributes, *ARRIVAL_COLUMNS]
    keys = {**{a: window.key(a) for a in audit.attributes}, "y_true": truth, "y_pred": decided}
    keys["late"] = flag
    inner = select(*[keys[n].label(f"k_{n}") for n in names]).where(labelled).subquery()
    grouping = [inner.c[f"k_{n}"] for n in names]
    result = connection.execute(select(*grouping, func.count().label("n")).group_by(*grouping))
    grouped = rows_frame(result, list(result.keys())).set_axis([*names, "n"], axis=1)
    ok = pd.Series(True, index=grouped.index)
    for name in audit.attributes:
        ok &= non_empty_text(grouped[name]).to_numpy(dtype=bool)
    truth_read, decision_read = as_binary(grouped["y_true"]), as_binary(grouped["y_pred"])
    ok &= truth_read.notna() & decision_read.notna()
    grouped = grouped[ok.to_numpy(dtype=bool)]
    frame = grouped.assign(
        **{a: canonical_text(grouped[a]) for a in audit.attributes},
        y_true=truth_read[ok].astype("int64"),
        y_pred=decision_read[ok].astype("int64"),
        late=grouped["late"].astype("int64").astype(bool),
        n=grouped["n"].astype("int64"),
    )
    return frame.groupby(names, sort=True, as_index=False)["n"].sum()
