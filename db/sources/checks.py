"""What an audit's source holds, checked before a run starts (``biasaudit run``) or when asked
(``biasaudit audits --check``): the model's rows in the window, the reference groups among the
attribute's values and, with ``labels``, whether the labels (and decisions) are 0/1-like. Each
problem is one line naming what was wrong, where, and what is accepted. The queries read
aggregates only: a row of the window, an attribute's distinct values, a column's distinct values.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from biasaudit.db.sources.catalogue import SourceError, source_problems
from biasaudit.db.sources.read import empty_window_message
from biasaudit.db.sources.window import window_bounds, window_of
from biasaudit.schemas.config import INTERSECTION_SEP, Audit
from biasaudit.schemas.frames import BINARY_RULE, as_binary, canonical_text, listed

# Distinct values read of a column: enough to name what is there, bounded for a float column.
DISTINCT = 50


def data_problems(
    engine: Engine, audit: Audit, as_of: datetime, now: datetime, labels: bool = False
) -> list[str]:
    """Why a run of ``audit`` as of ``as_of`` would fail on its source's content, one line each
    (empty: none found): the catalogue's problems (db.sources.catalogue.source_problems), no row of
    the model (or its model_version) in the window, a reference group that is not among its
    attribute's values; with ``labels``, a y_true (or y_pred) column whose values are not 0/1-like
    in a share above ``max_invalid_fraction``."""
    found = source_problems(engine, audit)
    if found:
        return found
    try:
        window = window_of(engine, audit)
    except SourceError as exc:
        return [str(exc)]
    start, end = window_bounds(audit, as_of)
    where = window.where(start, end, now)
    problems = []
    with engine.connect() as connection:
        first = select(window.raw["prediction_id"]).where(where).limit(1)
        if connection.execute(first).first() is None:
            return [_empty(connection, window, audit, start, end, now)]
        for attribute, name in audit.reference_groups.items():
            if attribute in audit.attributes:
                groups = _missing_group(connection, window, where, attribute, name)
                if groups is not None:
                    problems.append(
                        f"reference group {name!r} of attribute {attribute!r} is not in the data "
                        f"(audit {audit.name!r}); groups: {listed(groups) or 'none'}"
                    )
                continue
            # an intersection's reference: each of its parts must be a value of its attribute
            members = dict(zip(audit.intersection_names, audit.intersections)).get(attribute, [])
            parts = name.split(INTERSECTION_SEP)
            if len(parts) != len(members):
                continue  # a group name holding the separator: the run checks it whole
            for member, part in zip(members, parts):
                groups = _missing_group(connection, window, where, member, part)
                if groups is not None:
                    problems.append(
                        f"reference group {name!r} of intersection {attribute!r} is not in the "
                        f"data (audit {audit.name!r}): {part!r} is not a value of {member!r}; "
                        f"groups of {member!r}: {listed(groups) or 'none'}"
                    )
                    break
        if labels:
            wanted = ["y_true"] if audit.decision else ["y_true", "y_pred"]
            for canonical in wanted:
                problem = _binary_problem(connection, window, where, audit, canonical)
                if problem:
                    problems.append(problem)
    return problems


def _missing_group(connection, window, where, attribute: str, name: str) -> list[str] | None:
    """None when ``name`` is among the window's values of ``attribute``; else those values,
    the most frequent first (as the run names them: canonical text)."""
    key = window.key(attribute)
    if connection.execute(select(key).where(where, key == name).limit(1)).first():
        return None
    sizes = connection.execute(
        select(key, func.count()).where(where).group_by(key).order_by(func.count().desc())
    ).all()
    values = pd.Series([v for v, _ in sizes], dtype=object)
    names = canonical_text(values) if len(values) else values
    if (names == name).any():
        return None
    return [n for n in names if n is not None]


def _empty(connection, window, audit: Audit, start, end, now: datetime) -> str:
    """Why the window is empty (db.sources.read.empty_window_message) and, where the model's rows
    lie outside it, the span they cover: the as-of dates (or window) that would read them."""
    message = empty_window_message(connection, window, start, end, now)
    if window.time is None or not message.startswith("no predictions"):
        return message
    span = select(func.min(window.time), func.max(window.time))
    if window.model is not None:
        span = span.where(window.model == audit.model_id)
    first, last = connection.execute(span).first() or (None, None)
    if first is None:
        return message
    return (
        f"{message}; the model's predictions span {str(first)[:19]} to {str(last)[:19]}: choose "
        f"an --as-of that window {audit.window!r} reaches them from, or a longer window"
    )


def _binary_problem(connection, window, where, audit: Audit, canonical: str) -> str | None:
    """A line when the window's values of ``canonical`` that are not 0/1-like (NULL labels
    excepted: an unknown outcome) are more than ``max_invalid_fraction`` of the window's rows, so
    that the run would fail (its share counts every row read); None otherwise. Of a column with
    more than DISTINCT values only the most frequent are judged: the share found is never above
    the run's."""
    key = window.raw[canonical]
    total = connection.execute(select(func.count()).where(where)).scalar_one()
    counted = connection.execute(
        select(key, func.count())
        .where(where)
        .group_by(key)
        .order_by(func.count().desc())
        .limit(DISTINCT)
    ).all()
    values = pd.Series([v for v, _ in counted], dtype=object)
    counts = pd.Series([int(n) for _, n in counted], dtype="int64")
    if canonical == "y_true":  # a NULL label is an unknown outcome, not a mistake
        known = ~values.isna().to_numpy()
        values, counts = values[known].reset_index(drop=True), counts[known].reset_index(drop=True)
    if not total or values.empty:
        return None
    bad = as_binary(values).isna().to_numpy()
    share = int(counts.to_numpy()[bad].sum()) / total
    if share <= audit.thresholds.max_invalid_fraction:
        return None
    shown = ", ".join(
        "NULL" if pd.isna(v) else repr(str(v)[:40]) for v in values.to_numpy()[bad][:5]
    )
    column = audit.source_column(canonical)
    return (
        f"source {audit.source!r}: column {column!r} ({canonical}) holds values that are not "
        f"accepted in {share:.1%} of the window's {total} rows, above max_invalid_fraction = "
        f"{audit.thresholds.max_invalid_fraction:.1%}: {shown}; accepted: {BINARY_RULE}"
        + (" (NULL: an unknown outcome)" if canonical == "y_true" else "")
    )
