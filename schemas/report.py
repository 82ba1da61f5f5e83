"""The frames a report is rendered from: gathered from a stored run by ``db.store.report_data``,
rendered by the pure ``tasks.report`` (which never reads the database itself)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd


def run_label(run_id: Any, version: Any) -> str:
    """How every output names a run: ``run 2 (v1)``, its id (unique in the store), then its
    version (1, 2, ... per audit and model; a run that did not succeed has none), never the
    model's own version."""
    if version is None or pd.isna(version):
        return f"run {run_id} (no version)"
    return f"run {run_id} (v{int(version)})"


def _empty() -> pd.DataFrame:
    return pd.DataFrame()


@dataclass(frozen=True)
class ReportFrames:
    """One stored run and its results, as plain frames (columns as stored; extra columns that
    later stages add flow through and are rendered where the report knows them).

    ``run``: the ``audit_runs`` row as a dict (config and summary included).
    ``trend``: raw group metric values of this run and the earlier runs of the same audit and model
    (by as-of, never a later one), with ``run_id``, ``version`` and ``as_of``.
    ``monitor``: the anytime-valid monitoring rows of the run, when that stage exists.
    ``scores``, ``calibration``, ``thresholds``: the score audit's rows (tasks.scores), empty
    where the run audited no score.
    ``completeness``: the run's label completeness per group (tasks.counts.label_completeness at
    the run's alpha) when the audit that computed it renders its own report (flows.pipeline);
    empty otherwise, and the report computes it from ``counts``: the same table either way.
    ``derived``: tables the report computes from these once and reads in several sections
    (tasks.report's ``per_frames``); not part of the run.
    """

    run: dict[str, Any]
    counts: pd.DataFrame = field(default_factory=_empty)
    metrics: pd.DataFrame = field(default_factory=_empty)
    detection: pd.DataFrame = field(default_factory=_empty)
    planning: pd.DataFrame = field(default_factory=_empty)
    match: pd.DataFrame = field(default_factory=_empty)
    meta: pd.DataFrame = field(default_factory=_empty)
    comparison: pd.DataFrame = field(default_factory=_empty)
    two_group: pd.DataFrame = field(default_factory=_empty)
    trend: pd.DataFrame = field(default_factory=_empty)
    monitor: pd.DataFrame = field(default_factory=_empty)
    scores: pd.DataFrame = field(default_factory=_empty)
    calibration: pd.DataFrame = field(default_factory=_empty)
    thresholds: pd.DataFrame = field(default_factory=_empty)
    completeness: pd.DataFrame = field(default_factory=_empty)
    derived: dict[Any, Any] = field(default_factory=dict, init=False, compare=False, repr=False)
