"""The audit core: validated confusion counts in, every stage's result frames out.

Pure: no database, no Prefect. One call of :func:`audit_counts` runs the statistical stages
on the counts frame (schemas.results.GROUP_COUNTS) in order:

    comparison pairs and their metrics (once) -> metrics and two-group metrics -> compare
    -> MATCH -> planning -> detection -> smoothing -> meta-metrics -> summary

The audit flow runs the very same function, each stage timed into the run's ``timings``;
``biasaudit.audit_frame`` runs it on a DataFrame. Each result frame has the columns of its
result table (db.store.results maps them), so a notebook and the database see the same numbers.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pandas as pd

from biasaudit.schemas.config import Audit
from biasaudit.schemas.metric_ids import MATCH_METRICS, TESTED_RATES
from biasaudit.schemas.quarantine import QUARANTINE_COLUMNS
from biasaudit.schemas.results import CONTRACTS, empty_result, validate_result
from biasaudit.tasks.compare import Previous, compare_with_previous
from biasaudit.tasks.counts import (
    check_reference_groups,
    comparison_pairs,
    completeness_warnings,
    label_completeness,
)
from biasaudit.tasks.detection import detect
from biasaudit.tasks.match import match_test
from biasaudit.tasks.memory import keep_freed_memory
from biasaudit.tasks.metametrics import attribute_meta_metrics
from biasaudit.tasks.metrics import CATALOGUE, compute_metrics, two_group_metrics
from biasaudit.tasks.planning import plan
from biasaudit.tasks.rates import comparison_rates
from biasaudit.tasks.smoothing import mark_empty_groups, smoothed_counts


@contextmanager
def timed(timings: dict[str, float] | None, stage: str) -> Iterator[None]:
    """Time what runs inside, in seconds (4 decimals), into ``timings[stage]`` (None: untimed)."""
    start = time.perf_counter()
    yield
    if timings is not None:
        timings[stage] = round(time.perf_counter() - start, 4)


@dataclass(frozen=True)
class AuditResult:
    """Every stage's result of one audit (frames with the columns of their result tables)."""

    counts: pd.DataFrame
    metrics: pd.DataFrame
    two_group: pd.DataFrame
    match: pd.DataFrame
    planning: pd.DataFrame
    detection: pd.DataFrame
    smoothed: pd.DataFrame
    metametrics: pd.DataFrame
    comparison: pd.DataFrame
    summary: Mapping[str, Any]
    quarantine: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=QUARANTINE_COLUMNS)
    )
    # The score audit (tasks.scores), empty where the audit has no score.
    scores: pd.DataFrame = field(default_factory=lambda: empty_result("scores"))
    calibration: pd.DataFrame = field(default_factory=lambda: empty_result("calibration"))
    thresholds: pd.DataFrame = field(default_factory=lambda: empty_result("thresholds"))
    # Local Law 144's scoring counts (tasks.ll144.scoring_rates), empty without a score.
    scoring: pd.DataFrame = field(default_factory=lambda: empty_result("scoring"))
    # Label completeness per group at the run's alpha (tasks.counts.label_completeness): the
    # summary's warnings and the report's are both read from this one table. Not stored.
    completeness: pd.DataFrame = field(default_factory=pd.DataFrame)

    def flagged(self) -> pd.DataFrame:
        """The detection rows flagged after multiplicity adjustment."""
        return self.detection[self.detection["flagged"].astype(bool)]

    def frames(self) -> dict[str, pd.DataFrame]:
        """Each frame with a result table's contract (schemas.results.CONTRACTS), by its name."""
        return {name: getattr(self, name) for name in CONTRACTS}


def bootstrap_seed(counts: pd.DataFrame) -> int:
    """A seed fixed by the counts: the same input gives the same bootstrap interval."""
    digest = hashlib.sha256(counts.to_csv(index=False).encode()).hexdigest()
    return int(digest[:8], 16)


def group_metrics(counts: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Raw per-group metrics of every group and complement (``estimator='raw'``)."""
    return compute_metrics(counts, [m for m in metrics if m in CATALOGUE]).assign(estimator="raw")


def smoothed_metrics(
    groups: pd.DataFrame, metrics: list[str], *, cps_lambda: float, additive_pseudocount: float
) -> pd.DataFrame:
    """Metrics of the CPS- and additively smoothed groups, with their ``estimator``."""
    names = [m for m in metrics if m in CATALOGUE]
    cps, additive = smoothed_counts(groups, cps_lambda, additive_pseudocount)
    return pd.concat(
        [
            compute_metrics(cps, names).assign(estimator="cps"),
            mark_empty_groups(compute_metrics(additive, names), groups).assign(
                estimator="additive"
            ),
        ],
        ignore_index=True,
    )


def _below_min_size(detection: pd.DataFrame) -> pd.Series:
    """'attribute=group' of each detection row left untested for its group's size."""
    small = detection["reason"].astype("string").str.startswith("group size").fillna(False)
    rows = detection[small.to_numpy(dtype=bool)]
    return rows["attribute"].astype(str) + "=" + rows["group_name"].astype(str)


def run_summary(
    counts: pd.DataFrame,
    metrics: pd.DataFrame,
    match: pd.DataFrame,
    detection: pd.DataFrame,
    planning: pd.DataFrame,
    comparison: pd.DataFrame,
    alpha: float,
    completeness: pd.DataFrame | None = None,
    arrival: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Headline numbers of a run (stored as ``audit_runs.summary``); ``completeness`` is the
    run's label_completeness table at ``alpha``, computed here when not given; ``arrival`` what
    the labels' arrival times show (tasks.counts.arrival_evidence), where the source has them."""
    if completeness is None:
        completeness = label_completeness(counts, alpha)
    groups = counts[counts["subset"] == "group"]
    sizes = groups[["tp", "fp", "fn", "tn"]].sum(axis=1)
    undefined = metrics[metrics["undefined_reason"].notna() & (metrics["subset"] == "group")]
    return {
        "groups": len(groups),
        "groups_per_attribute": groups.groupby("attribute").size().astype(int).to_dict(),
        "smallest_group": int(sizes.min()) if len(sizes) else 0,
        "undefined_metrics": len(undefined),
        "undefined_by_metric": undefined.groupby("metric").size().astype(int).to_dict(),
        "match_tests": int(match["p_value"].notna().sum()),
        "match_below_alpha": int((match["p_adjusted"] < alpha).sum()),  # after BH
        "groups_below_min_size": sorted(set(_below_min_size(detection))),
        "label_completeness_warnings": completeness_warnings(completeness, arrival),
        "detection_tests": int(detection["p_value"].notna().sum()),
        "underpowered": int(
            planning["verdict"].astype("string").str.startswith("underpowered").sum()
        ),
        "significant_changes": (
            int(comparison["significant"].sum()) if not comparison.empty else None
        ),
        "flagged": [
            f"{r.attribute}={r.group_name} {r.metric} {r.direction} than {r.reference} "
            f"({r.difference:+.3f}, adjusted p {r.p_adjusted:.2g})"
            for r in detection[detection["flagged"].astype(bool)].itertuples()
        ],
    }


def audit_counts(
    counts: pd.DataFrame,
    audit: Audit,
    *,
    previous: Previous | None = None,
    timings: dict[str, float] | None = None,
    arrival: pd.DataFrame | None = None,
) -> AuditResult:
    """Run every statistical stage of ``audit`` on validated ``counts``
    (schemas.results.GROUP_COUNTS).

    ``previous`` is the previous run's id and per-group metrics for the compare stage (none by
    default). ``timings``, where given, receives each stage's time in seconds under its name (a
    run's stored ``timings``). ``arrival`` (tasks.counts.arrival_evidence), where the labels'
    arrival times are known, tells the label-completeness warnings which mechanism those times
    show.
    """
    keep_freed_memory()  # the stages' arrays reuse freed memory from the first audit on
    counts = validate_result("counts", counts)
    previous = previous or (None, pd.DataFrame())
    # Before any stage, so that a flow fails on this one line and not inside a task.
    check_reference_groups(counts, audit.reference_groups, audit.name)
    thresholds, smoothing = audit.thresholds, audit.smoothing
    alpha, min_group_size = thresholds.alpha, thresholds.min_group_size
    rates = [m for m in audit.metrics if m in TESTED_RATES]
    with timed(timings, "pairs"):
        group, reference = comparison_pairs(counts, audit.reference_groups)
    with timed(timings, "metrics"):
        metrics = group_metrics(counts, audit.metrics)
    with timed(timings, "two-group metrics"):
        two_group = two_group_metrics(group, reference)
    two_group = two_group[two_group["metric"].isin(audit.metrics)].reset_index(drop=True)
    with timed(timings, "compare"):
        comparison = compare_with_previous(previous, metrics, alpha=alpha)
    with timed(timings, "match"):
        match = match_test(
            group,
            reference,
            [m for m in audit.metrics if m in MATCH_METRICS],
            min_reference_ratio=thresholds.match_reference_ratio,
            min_group_size=min_group_size,
        )
    with timed(timings, "comparison rates"):
        tested = comparison_rates(group, reference, rates, min_group_size=min_group_size)
    with timed(timings, "planning"):
        planning = plan(
            tested,
            tau=thresholds.planning_disparity,
            alpha=alpha,
            power=thresholds.power,
            tolerance=thresholds.tolerance,
            planning_power=thresholds.planning_power,
        )
    with timed(timings, "detection"):
        detection = detect(tested, tolerance=thresholds.tolerance, alpha=alpha)
    with timed(timings, "smoothing"):
        smoothed = smoothed_metrics(
            counts[counts["subset"] == "group"],
            audit.metrics,
            cps_lambda=smoothing.cps_lambda,
            additive_pseudocount=smoothing.additive_pseudocount,
        )
    with timed(timings, "meta-metrics"):
        metametrics = attribute_meta_metrics(
            metrics,
            rates,
            n_boot=thresholds.bootstrap_replicates,
            confidence=1 - alpha,
            seed=bootstrap_seed(counts),
            min_group_size=min_group_size,
        )
    completeness = label_completeness(counts, alpha)  # the summary's and the report's
    summary = run_summary(
        counts, metrics, match, detection, planning, comparison, alpha, completeness, arrival
    )
    return AuditResult(
        counts=counts,
        metrics=validate_result("metrics", metrics),
        two_group=validate_result("two_group", two_group),
        match=validate_result("match", match),
        planning=validate_result("planning", planning),
        detection=validate_result("detection", detection),
        smoothed=validate_result("smoothed", smoothed),
        metametrics=validate_result("metametrics", metametrics),
        comparison=validate_result("comparison", comparison),
        summary=MappingProxyType(summary),
        completeness=completeness,
    )
