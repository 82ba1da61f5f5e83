"""The push-down's statements: one GROUP BY over the window's finest keys, with the per-row rules
as a conditional sum, and the statements that read again the rows it could not clear.

Read and judged by db.sources.pushdown. Each engine's form of the GROUP BY is its module's
(SourceEngine.grouped).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import and_, case, literal, not_, or_, select
from sqlalchemy.sql import Select

from biasaudit.db.sources.cells import (
    OUTCOMES,
    decision_expression,
    score_expression,
    window_score_bins,
    window_score_median,
)
from biasaudit.db.sources.engines.base import floor_of
from biasaudit.db.sources.window import Window
from biasaudit.schemas.score_bins import ScoreBins

# Bad key groups fetched per query (an OR of this many conjunctions).
FETCH_GROUPS = 200


def bin_expression(window: Window, edges):
    """The lower edge of the score's bin (schemas.score_bins.bin_of) in SQL: a CASE from the
    highest edge down, the lowest edge where no other applies."""
    score = score_expression(window)
    if len(edges) < 2:
        return literal(float(edges[0]) if len(edges) else 0.0)
    whens = [(score >= literal(float(e)), literal(float(e))) for e in edges[:0:-1]]
    return case(*whens, else_=literal(float(edges[0])))


def cell_expression(window: Window, bins: ScoreBins):
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


@dataclass(frozen=True)
class Grouped:
    """The push-down's GROUP BY (``query``) and what reading it needs: the key names and their
    labelled expressions (``k_NAME``), the per-row flag (1: every rule cleared), the window
    filter, and with a decision the window's score bins, median and number of scores."""

    names: list[str]
    keys: list[Any]
    flag: Any
    in_window: Any
    query: Select
    bins: ScoreBins | None = None
    median: float = np.nan
    sample: int = 0


def grouped_statement(
    connection, window: Window, start, end, now: datetime, duplicated: list
) -> Grouped:
    """The GROUP BY of the window: per key its rows ``n``, those a per-row rule does not clear
    (``suspect``: repeated ids among them); with a decision, the score's bin and cell among the
    keys and the sums of the score of the rows that pass and of those above the window's median
    (found here, in the database)."""
    audit = window.audit
    names = [*audit.attributes, *OUTCOMES] + (["score_bin", "score_cell"] if audit.decision else [])
    ok, in_window = window.row_ok(now), window.where(start, end, now)
    if duplicated:
        ok = and_(ok, not_(window.key("prediction_id").in_(duplicated)))
    flag = case((ok, 1), else_=0)  # a rule that is NULL (a NULL value) fails
    expressions = {
        **{a: window.key(a) for a in audit.attributes},
        "y_true": window.raw["y_true"],
        "y_pred": decision_expression(window, audit),
    }
    per_row = {}
    median, sample, bins = np.nan, 0, None
    if audit.decision:
        bins = window_score_bins(connection, window, start, end, now)
        median, sample = window_score_median(connection, window, start, end, now)
        expressions["score_bin"] = bin_expression(window, bins.edges)
        expressions["score_cell"] = cell_expression(window, bins)
        score = score_expression(window)
        per_row = {
            "score_sum": case((ok, score), else_=0.0),
            "above_median": case((and_(ok, score > literal(median)), 1), else_=0)
            if sample
            else literal(0),
        }
    keys = [expressions[n].label(f"k_{n}") for n in names]
    query = window.engine.grouped(keys, names, ok, per_row, in_window)
    return Grouped(names, keys, flag, in_window, query, bins, median, sample)


def suspects_statements(
    window: Window, grouped: Grouped, bad: pd.DataFrame, any_suspect: bool
) -> list[Select]:
    """The statements reading again the rows that failed a per-row rule (only if
    ``any_suspect``) and those of the ``bad`` keys (grouped rows with an invalid key), each row
    once, with its flag and keys (to drop rows a loose SQL key comparison fetched too)."""
    names, flag = grouped.names, grouped.flag
    key_of = {n: k.element for n, k in zip(names, grouped.keys)}
    conditions = []
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
    columns = window.selected() + grouped.keys + [flag.label("ok")]
    # A row is fetched once: for its failed rule, or (passing every per-row rule) for its key.
    return [
        select(*columns).where(and_(grouped.in_window, condition))
        for condition in [flag == 0] * any_suspect + [and_(flag == 1, c) for c in conditions]
    ]


def suspects_columns(window: Window, grouped: Grouped) -> list[str]:
    """The columns ``suspects_statements`` read, for the frame of none."""
    return [c.name for c in window.selected() + grouped.keys + [grouped.flag.label("ok")]]
