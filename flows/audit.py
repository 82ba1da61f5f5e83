"""The audit flow: one Prefect flow run audits one model (../shared/DESIGN.md). Wiring only:

    begin -> scan (memory, stream or push-down) -> counts
          -> core stages (tasks.core: metrics, compare, match, planning, detection,
             smoothing, meta-metrics) -> persist -> report

Database steps are retried tasks (flows.stages); each core stage runs as its own task. ``begin``
commits a ``running`` row; a failure at any stage marks it failed with the error (and any
quarantined rows) and re-raises; only a complete run commits, with all its results, as succeeded.
The same body runs as plain function calls (``run_audit``) for tests, benchmarks and embedding.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from biasaudit.db.engine import database_url
from biasaudit.db.runs import RunRecord
from biasaudit.db.source import window_bounds
from biasaudit.flows import stages
from biasaudit.schemas.config import Audit, load_audit
from biasaudit.schemas.quarantine import check_invalid_fraction
from biasaudit.tasks.core import audit_counts
from biasaudit.tasks.counts import group_counts
from prefect import Task, flow, runtime

CONFIG_ENV = "BIASAUDIT_CONFIG"


def default_config_path() -> str:
    return os.environ.get(CONFIG_ENV, "biasaudit.toml")


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    timings[stage] = round(time.perf_counter() - start, 4)


def new_record(audit: Audit, as_of: datetime) -> RunRecord:
    """The run's record before any stage: identity, window, configuration, code version."""
    start, end = window_bounds(audit, as_of)
    return RunRecord(
        audit_name=audit.name,
        model_id=audit.model_id,
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


Call = Callable[..., Any]


def _as_task(task: Task, *args: Any) -> Any:
    return task(*args)


def _as_function(task: Task, *args: Any) -> Any:
    return task.fn(*args)


def _stages_as(call: Call, timings: dict[str, float]) -> Call:
    """The core's ``run`` hook: each pure stage through ``call`` as its own task, timed."""

    def run(name: str, function: Callable[..., Any], *args: Any) -> Any:
        with _timed(timings, name):
            return call(stages.stage_task(name, function), *args)

    return run


def execute_audit(
    audit_name: str,
    config_path: str | None,
    db_url: str | None,
    as_of: datetime | None,
    force: bool,
    call: Call,
) -> dict:
    """begin -> scan -> counts -> core stages -> persist -> report; ``call(task, *args)`` runs each."""
    audit = load_audit(Path(config_path or default_config_path()), audit_name)
    url = database_url(db_url)
    record = new_record(audit, as_of or datetime.now(UTC))
    thresholds, timings = audit.thresholds, record.timings
    run_id = call(stages.begin, url, record, timedelta(hours=thresholds.stale_run_hours))
    quarantine = None
    try:
        with _timed(timings, f"scan ({audit.scan.mode})"):
            scanned = call(
                stages.scan, url, audit, record.window_start, record.window_end, record.started_at
            )
        quarantine = scanned.quarantine
        record.rows_read, record.rows_valid = scanned.rows_read, scanned.rows_valid
        record.rows_unlabelled = scanned.rows_unlabelled
        record.rows_quarantined = scanned.rows_read - scanned.rows_valid
        record.input_fingerprint = scanned.fingerprint
        check_invalid_fraction(
            record.rows_read, record.rows_quarantined, thresholds.max_invalid_fraction
        )
        with _timed(timings, "counts"):
            counts = call(
                stages.stage_task("counts", group_counts),
                scanned.cells,
                audit.attributes,
                audit.intersections,
            )
        previous = call(  # the previous as-of, and whether its window overlaps (issue 16)
            stages.previous_run, url, audit.name, audit.model_id, record.as_of, record.window_start
        )
        result = audit_counts(counts, audit, previous=previous, run=_stages_as(call, timings))
        record.summary = dict(result.summary)
        monitoring = {}
        if audit.monitor is not None:  # issue 16: this run's increment, anytime-valid alarms
            from biasaudit.flows.monitoring import monitor_tables

            with _timed(timings, "monitor"):
                task = stages.database_task(monitor_tables)
                monitoring = call(task, url, audit, record.as_of, record.started_at)
        with _timed(timings, "persist"):
            run_id, new = call(
                stages.persist, url, run_id, record, result, quarantine, force, monitoring
            )
    except Exception as exc:
        call(stages.record_failure, url, run_id, record, f"{type(exc).__name__}: {exc}", quarantine)
        raise
    finally:
        stages.release(run_id)
    _report(audit, run_id, new, record)
    try:
        report = call(stages.report, url, run_id, audit.name, record.summary)
    except Exception as exc:  # noqa: BLE001 - the run has committed: a failing report fails alone
        print(f"run {run_id} succeeded; its report was not written: {type(exc).__name__}: {exc}")
        report = None
    return {
        "audit": audit.name,
        "model": audit.model_id,
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
