"""The audit flow: one Prefect flow run audits one model, stage by stage (../shared/DESIGN.md).

    begin -> extract -> validate -> counts   (or one streamed / pushed-down scan)
          -> metrics -> compare -> match -> planning -> detection -> smoothing
          -> meta-metrics -> persist -> report

Each stage is a thin task over the pure functions of its ``tasks/`` module. ``begin`` commits a
``running`` row; a failure at any stage marks it failed with the error (and any quarantined rows)
and re-raises; only a complete run commits, with all its results, as succeeded. The same body runs
as plain function calls (``run_audit``) for tests, benchmarks and embedding without Prefect.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from importlib.metadata import version as package_version
from pathlib import Path

import pandas as pd
from prefect import flow, runtime

from biasaudit.db.engine import database_url
from biasaudit.db.models import (
    ComparisonResult,
    DetectionResult,
    GroupCount,
    MatchResult,
    MetaMetricResult,
    MetricResult,
    PlanningResult,
    TwoGroupResult,
)
from biasaudit.db.runs import RunRecord
from biasaudit.schemas.config import Audit, load_config
from biasaudit.tasks.compare import compare_stage, previous_metrics
from biasaudit.tasks.counts import comparison_pairs, count
from biasaudit.tasks.detection import detection_stage
from biasaudit.tasks.extract import extract, fingerprint, window_bounds
from biasaudit.tasks.match import match_stage
from biasaudit.tasks.metametrics import metametrics_stage
from biasaudit.tasks.metrics import metrics_stage
from biasaudit.tasks.persist import begin_run, persist, record_failure
from biasaudit.tasks.planning import planning_stage
from biasaudit.tasks.report import report_stage
from biasaudit.tasks.scan import scan
from biasaudit.tasks.smoothing import smoothing_stage
from biasaudit.tasks.validate import check_invalid_fraction, validate

CONFIG_ENV = "BIASAUDIT_CONFIG"


def default_config_path() -> str:
    return os.environ.get(CONFIG_ENV, "biasaudit.toml")


@contextmanager
def _timed(timings: dict[str, float], stage: str):
    start = time.perf_counter()
    yield
    timings[stage] = round(time.perf_counter() - start, 4)


def run_summary(
    counts: pd.DataFrame,
    metrics: pd.DataFrame,
    match: pd.DataFrame,
    detection: pd.DataFrame,
    planning: pd.DataFrame,
    alpha: float,
) -> dict:
    """Headline numbers of a run for ``audit_runs.summary``."""
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
        "match_below_alpha": int((match["p_value"] < alpha).sum()),
        "detection_tests": int(detection["p_value"].notna().sum()),
        "underpowered": int(planning["verdict"].str.startswith("underpowered").sum()),
        "flagged": [
            f"{r.attribute}={r.group_name} {r.metric} {r.direction} than {r.reference} "
            f"({r.difference:+.3f}, adjusted p {r.p_adjusted:.2g})"
            for r in detection[detection["flagged"]].itertuples()
        ],
    }


def new_record(audit: Audit, as_of: datetime) -> RunRecord:
    start, end = window_bounds(audit, as_of)
    return RunRecord(
        audit_name=audit.name,
        model_id=audit.model,
        model_version=audit.model_version,
        as_of=end,
        window_start=start,
        window_end=end,
        config=audit.model_dump(mode="json"),
        config_hash=audit.config_hash(),
        code_version=package_version("biasaudit"),
        started_at=datetime.now(UTC),
        flow_run_id=str(runtime.flow_run.id) if runtime.flow_run.id else None,
    )


@flow(name="audit", flow_run_name="audit-{audit_name}", log_prints=True)
def audit_flow(
    audit_name: str,
    config_path: str | None = None,
    db_url: str | None = None,
    as_of: datetime | None = None,
    force: bool = False,
) -> dict:
    """Audit one configured model as of ``as_of`` (default now); returns the run's identity."""
    return execute_audit(audit_name, config_path, db_url, as_of, force, call=_as_task)


def run_audit(
    audit_name: str,
    config_path: str | None = None,
    db_url: str | None = None,
    as_of: datetime | None = None,
    force: bool = False,
) -> dict:
    """The same audit as plain function calls: no Prefect run, no retries."""
    return execute_audit(audit_name, config_path, db_url, as_of, force, call=_as_function)


def _as_task(task, *args):
    return task(*args)


def _as_function(task, *args):
    return task.fn(*args)


def execute_audit(
    audit_name: str,
    config_path: str | None,
    db_url: str | None,
    as_of: datetime | None,
    force: bool,
    call: Callable,
) -> dict:
    """The audit's stages in order; ``call(task, *args)`` runs each one."""
    audit = load_config(Path(config_path or default_config_path())).get(audit_name)
    url = database_url(db_url)
    record = new_record(audit, as_of or datetime.now(UTC))
    thresholds, timings = audit.thresholds, record.timings
    stale_after = timedelta(hours=thresholds.stale_run_hours)
    run_id = call(begin_run, url, record, stale_after)
    quarantine = None
    try:
        if audit.scan.mode == "memory":
            with _timed(timings, "extract"):
                frame = call(extract, url, audit, record.window_start, record.window_end)
            record.input_fingerprint = fingerprint(frame)
            with _timed(timings, "validate"):
                valid, quarantine = call(validate, frame, audit.attributes, record.started_at)
            record.rows_read, record.rows_valid = len(frame), len(valid)
            record.rows_unlabelled = int(valid["y_true"].isna().sum())
            with _timed(timings, "counts"):
                counts = call(count, valid, audit)
        else:
            with _timed(timings, f"scan ({audit.scan.mode})"):
                reduced = call(
                    scan, url, audit, record.window_start, record.window_end, record.started_at
                )
            counts, quarantine = reduced.counts, reduced.quarantine
            record.rows_read, record.rows_valid = reduced.rows_read, reduced.rows_valid
            record.rows_unlabelled = reduced.rows_unlabelled
            record.input_fingerprint = reduced.fingerprint
        record.rows_quarantined = record.rows_read - record.rows_valid
        check_invalid_fraction(
            record.rows_read, record.rows_quarantined, thresholds.max_invalid_fraction
        )
        pairs = comparison_pairs(counts, audit.reference_groups)
        with _timed(timings, "metrics"):
            metrics, two_group = call(metrics_stage, counts, pairs, audit.metrics)
        with _timed(timings, "compare"):
            previous = call(previous_metrics, url, audit.name, audit.model)
            comparison = call(compare_stage, previous, metrics, thresholds.alpha)
        with _timed(timings, "match"):
            match = call(match_stage, *pairs, audit.metrics)
        with _timed(timings, "planning"):
            planning = call(
                planning_stage,
                *pairs,
                audit.metrics,
                thresholds.planning_tau,
                thresholds.alpha,
                thresholds.power,
            )
        with _timed(timings, "detection"):
            detection = call(
                detection_stage, *pairs, audit.metrics, thresholds.tolerance, thresholds.alpha
            )
        with _timed(timings, "smoothing"):
            groups = counts[counts["subset"] == "group"]
            smoothed = call(
                smoothing_stage,
                groups,
                audit.metrics,
                audit.smoothing.cps_lambda,
                audit.smoothing.additive_alpha,
            )
        with _timed(timings, "meta-metrics"):
            seed = int(record.input_fingerprint[:8], 16)  # same input, same bootstrap
            metametrics = call(
                metametrics_stage,
                metrics,
                audit.metrics,
                thresholds.bootstrap_replicates,
                1 - thresholds.alpha,
                seed,
            )
        record.summary = run_summary(counts, metrics, match, detection, planning, thresholds.alpha)
        record.summary["significant_changes"] = (
            int(comparison["significant"].sum()) if not comparison.empty else None
        )
        results = {
            GroupCount: counts,
            MetricResult: pd.concat([metrics.assign(estimator="raw"), smoothed]),
            MatchResult: match,
            DetectionResult: detection,
            PlanningResult: planning,
            MetaMetricResult: metametrics,
            ComparisonResult: comparison,
            TwoGroupResult: two_group[
                ["attribute", "group_name", "reference", "metric", "value", "undefined_reason"]
            ],
        }
        with _timed(timings, "persist"):
            run_id, new = call(persist, url, run_id, record, results, quarantine, force)
    except Exception as exc:
        call(record_failure, url, run_id, record, f"{type(exc).__name__}: {exc}", quarantine)
        raise
    _report(audit, run_id, new, record)
    report = call(report_stage, url, run_id, audit.name, record.summary)
    return {
        "audit": audit.name,
        "model": audit.model,
        "run_id": run_id,
        "new": new,
        "report": report,
    }


def _report(audit: Audit, run_id: int, new: bool, record: RunRecord) -> None:
    status = "new version" if new else "unchanged input: existing run"
    summary = record.summary
    print(
        f"audit {audit.name}: run {run_id} ({status}), {record.rows_valid} valid rows, "
        f"{record.rows_quarantined} quarantined, {summary['undefined_metrics']} undefined metric "
        f"values, {summary['match_below_alpha']} of {summary['match_tests']} MATCH tests below α, "
        f"{len(summary['flagged'])} of {summary['detection_tests']} detection tests flagged"
    )
    for line in summary["flagged"]:
        print(f"  flagged: {line}")


if __name__ == "__main__":
    import sys

    audit_flow(sys.argv[1])
