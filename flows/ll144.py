"""The Local Law 144 report of a stored run (tasks.ll144): the run's group counts (a decision) or
its scoring counts (a score), the rows quarantined for an unknown category, the run's dates."""

from __future__ import annotations

import pandas as pd
from sqlalchemy import Engine, func, select

from biasaudit.db.store.history import get_run, read_frame
from biasaudit.db.store.models import GroupCount, QuarantinedRow, ScoringResult, ThresholdResult
from biasaudit.schemas.names import spreadsheet_frame
from biasaudit.tasks.ll144 import (
    binned_scoring_counts,
    binned_scoring_note,
    exact_scoring_note,
    impact_table,
    ll144_csv,
    ll144_html,
)


def _selection_counts(engine: Engine, run_id: int) -> pd.DataFrame:
    """Per (attribute, group): every audited row, and those selected (y_pred 1, labelled or not)."""
    query = select(GroupCount).where(GroupCount.run_id == run_id, GroupCount.subset == "group")
    with engine.connect() as connection:
        counts = read_frame(query, connection)
    return counts.assign(
        n=counts[["tp", "fp", "fn", "tn", "n_unlabelled"]].sum(axis=1),
        selected=counts["tp"] + counts["fp"] + counts["unlabelled_pos"],
    )


def _unknown(engine: Engine, run_id: int, attributes: list[str]) -> dict[str, int]:
    """Rows quarantined for their value of each attribute (missing or empty: unknown category)."""
    query = (
        select(QuarantinedRow.column_name, func.count(func.distinct(QuarantinedRow.row_ref)))
        .where(QuarantinedRow.run_id == run_id, QuarantinedRow.column_name.in_(attributes))
        .group_by(QuarantinedRow.column_name)
    )
    with engine.connect() as connection:
        found = {name: count for name, count in connection.execute(query).all()}
    return {a: int(found.get(a, 0)) for a in attributes}


def _unknown_rows(engine: Engine, run_id: int, attributes: list[str]) -> int:
    """Rows quarantined for an unknown category of any attribute, each once: individuals audited
    whose category is unknown (no table holds them)."""
    query = select(func.count(func.distinct(QuarantinedRow.row_ref))).where(
        QuarantinedRow.run_id == run_id, QuarantinedRow.column_name.in_(attributes)
    )
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def _audited(groups: pd.DataFrame, unknown: int) -> dict[str, int]:
    """Per attribute, every row audited: the rows of its tables (a valid row has every category)
    and the rows of an unknown category, the base of the 2% rule's share."""
    return {str(a): int(n) + unknown for a, n in groups.groupby("attribute")["n"].sum().items()}


def _at_threshold(
    engine: Engine, run_id: int, table: pd.DataFrame, audited: dict[str, int]
) -> pd.DataFrame:
    """``table`` with each category's selection at the configured threshold beside it (the run's
    decision, y_pred = 1: score at or above the threshold), from the run's group counts."""
    selection = impact_table(_selection_counts(engine, run_id), audited=audited)
    beside = selection[["attribute", "group_name", "selected", "rate", "impact_ratio"]].rename(
        columns={
            "selected": "selected_at_threshold",
            "rate": "rate_at_threshold",
            "impact_ratio": "impact_ratio_at_threshold",
        }
    )
    return table.merge(beside, on=["attribute", "group_name"], how="left")


def _scoring(engine: Engine, run_id: int) -> tuple[pd.DataFrame, str] | None:
    """Per (attribute, group) the rows and those scoring above the median, with the scoring
    rate's definition; None where the run audited no score. A run stored before its scoring
    counts were recorded has only its threshold sweep: the median is then that of the bins."""
    with engine.connect() as connection:
        stored = read_frame(select(ScoringResult).where(ScoringResult.run_id == run_id), connection)
        if len(stored):
            one = stored[stored["attribute"] == stored["attribute"].min()]  # every row once
            median, sample = stored["median_score"].iloc[0], int(stored["sample_size"].iloc[0])
            note = exact_scoring_note(median, sample, int(one["n"].sum()))
            return stored.rename(columns={"above_median": "selected"}), note
        sweep = read_frame(
            select(ThresholdResult).where(ThresholdResult.run_id == run_id), connection
        )
    if not len(sweep):
        return None
    groups = binned_scoring_counts(sweep)
    return groups, binned_scoring_note(groups["median"].iloc[0], groups["threshold"].iloc[0])


def ll144_report(engine: Engine, run_id: int) -> tuple[str, str]:
    """(HTML, CSV) of the run's Local Law 144 tables: scoring rates where the run audited a score,
    else selection rates."""
    run = get_run(engine, run_id)
    if run is None:
        raise ValueError(f"no run with id {run_id}")
    scoring = _scoring(engine, run_id)
    groups = scoring[0] if scoring else _selection_counts(engine, run_id)
    config = run.config if isinstance(run.config, dict) else {}
    attributes = list(config.get("attributes", []))
    audited = _audited(groups, _unknown_rows(engine, run_id, attributes))
    table = impact_table(groups, audited=audited)
    decision = config.get("decision")
    threshold = None
    if scoring and isinstance(decision, dict) and decision.get("threshold") is not None:
        threshold = float(decision["threshold"])
        table = _at_threshold(engine, run_id, table, audited)
    start = run.window_start.date().isoformat() if run.window_start else "the first prediction"
    page = ll144_html(
        table,
        title=f"Local Law 144 bias audit: {run.audit_name} (run {run_id})",
        scoring=scoring[1] if scoring else None,
        audit_date=run.finished_at.date().isoformat(),
        period=f"{start} to {run.window_end.date().isoformat()}",
        unknown=_unknown(engine, run_id, attributes),
        threshold=threshold,
        audited=audited,
    )
    return page, ll144_csv(spreadsheet_frame(table))  # no formula, no control character
