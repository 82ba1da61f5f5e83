"""The audit pipeline, one body for both ways of running it. No Prefect here:

    begin -> scan (memory, stream or push-down) -> counts -> identical run? (stop: reuse it)
          -> core stages (tasks.core: metrics, compare, match, planning, detection,
             smoothing, meta-metrics) -> persist -> report

``execute_audit`` runs every step through a ``run(stage, function, *args)`` hook (``Runner``):
``run_audit`` calls the functions (tests, benchmarks, embedding; Prefect is
never imported), ``flows.audit.audit_flow`` runs the DATABASE_STEPS as Prefect tasks with
retries and the pure stages as plain calls (flows.stages). ``begin`` commits a ``running`` row; a
failure at any stage marks it failed with the error (and any quarantined rows) and re-raises;
only a complete run commits, with all its results, as succeeded. A run whose input and
configuration equal a succeeded run's returns that run before the statistics (unless forced).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from importlib.metadata import version as package_version
from pathlib import Path
from typing import ParamSpec, Protocol, TypeVar
from zoneinfo import ZoneInfo

import pandas as pd

from biasaudit.db.engine import database_url, engine_scope, parse_url, safe_url
from biasaudit.db.retry import is_transient, step_failed
from biasaudit.db.sources.catalogue import source_url
from biasaudit.db.sources.cells import Scanned, input_fingerprint
from biasaudit.db.sources.scan import scan_window
from biasaudit.db.sources.window import window_bounds
from biasaudit.db.store.history import previous_run_metrics
from biasaudit.db.store.models import store_limits
from biasaudit.db.store.results import result_tables
from biasaudit.db.store.runs import (
    ERROR_CHARACTERS,
    SUCCEEDED,
    RunRecord,
    SavedRun,
    record_failed_run,
    release_run,
    reuse_identical_run,
    run_status,
    save_run,
    start_run,
)
from biasaudit.flows.config_files import default_config_path, load_audit
from biasaudit.flows.logs import one_line
from biasaudit.flows.report import write_report
from biasaudit.flows.schedule import Schedule
from biasaudit.schemas.config import Audit
from biasaudit.schemas.frames import listed
from biasaudit.schemas.names import printable
from biasaudit.schemas.quarantine import NoValidRows, TooManyInvalidRows, check_invalid_fraction
from biasaudit.schemas.report import run_label
from biasaudit.tasks.core import AuditResult, audit_counts, timed
from biasaudit.tasks.counts import arrival_evidence_of_counts, group_counts
from biasaudit.tasks.ll144 import scoring_rates
from biasaudit.tasks.scores import score_audit

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class Runner(Protocol):
    """The hook each step runs through: ``run(stage, function, *args, **options)`` returns what
    ``function(*args, **options)`` returns, checked against the function's own signature."""

    def __call__(
        self, stage: str, function: Callable[P, R], /, *args: P.args, **options: P.kwargs
    ) -> R: ...


def call(stage: str, function: Callable[P, R], /, *args: P.args, **options: P.kwargs) -> R:
    """The default ``run`` hook: call the step's function."""
    return function(*args, **options)

# Every run this process stored, as {"run_id", "version", "audit"}, appended the moment its result
# is committed: a command whose flow then fails or hangs in Prefect says which runs are stored
# (flows.cli.server.bounded_flow).
STORED_RUNS: list[dict] = []
# Every run this process began, as {"url", "run_id", "record"}: a command that gives up
# on Prefect before storing a run marks it failed (``give_up``).
BEGUN_RUNS: list[dict] = []


def new_record(
    audit: Audit,
    as_of: datetime,
    flow_run_id: str | None = None,
    cron: str | None = None,
    timezone: str | None = None,
) -> RunRecord:
    """The run's record before any stage: identity, window, configuration, code version. The
    window's days are calendar days in ``timezone`` (default UTC); with a ``cron`` schedule (in
    ``timezone``), the window ends at the schedule's nominal instant at or before ``as_of`` and
    starts at a nominal instant, so consecutive scheduled windows tile time (flows.schedule)."""
    zone = ZoneInfo(timezone) if timezone else None
    nominal = Schedule(cron, timezone or "UTC").floor if cron else None
    start, end = window_bounds(audit, as_of, zone, nominal)
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
        flow_run_id=flow_run_id,
    )


# ---- database steps (flows.stages runs these as Prefect tasks with retries) -------------------


def begin(db_url: str, record: RunRecord, stale_after: timedelta) -> int:
    """Mark this audit's dead runs failed, wait for a live run of it still going (up to
    ``stale_after``), then commit a ``running`` row and take its lease (db.store.runs)."""
    with engine_scope(db_url) as engine:
        run_id = start_run(engine, record, wait=stale_after, stale=stale_after)
    BEGUN_RUNS.append({"url": db_url, "run_id": run_id, "record": record})
    return run_id


def scan(
    db_url: str, audit: Audit, start: datetime | None, end: datetime, now: datetime
) -> Scanned:
    """The audit window as validated cells, quarantine and row accounting (db.sources.scan), read
    from the audit's source database (``source_db``, else the store); rows with a group name the
    store cannot hold are quarantined before any statistic (db.store.models.store_limits)."""
    store = store_limits(parse_url(db_url).get_dialect()())
    limit = store.attribute_chars
    long = [n for n in [*audit.attributes, *audit.intersection_names] if limit and len(n) > limit]
    if long:
        raise ValueError(
            f"attribute and intersection names longer than {limit} characters, the longest the "
            f"{parse_url(db_url).get_backend_name()} store keeps: {listed(long)}"
        )
    with engine_scope(source_url(audit, db_url)) as engine:
        return scan_window(engine, audit, start, end, now, store)


def previous_run(
    db_url: str,
    audit_name: str,
    model_id: str,
    as_of: datetime | None = None,
    window_start: datetime | None = None,
) -> tuple[int | None, pd.DataFrame] | tuple[int | None, pd.DataFrame, bool]:
    """The previous run of the audit and its per-group metrics, for the compare stage (with
    ``as_of``: the run of the previous as-of, and whether its window overlaps this run's)."""
    with engine_scope(db_url) as engine:
        return previous_run_metrics(engine, audit_name, model_id, as_of, window_start)


def identical_run(db_url: str, run_id: int, record: RunRecord) -> tuple[SavedRun, dict] | None:
    """A succeeded run with this run's input and configuration (and its summary), this run's
    row then removed; None when there is none (db.store.runs.reuse_identical_run)."""
    with engine_scope(db_url) as engine:
        return reuse_identical_run(engine, run_id, record)


def monitor(db_url: str, audit: Audit, as_of: datetime, now: datetime) -> dict[type, pd.DataFrame]:
    """This run's increment of a monitored audit (flows.monitoring.monitor_tables)."""
    from biasaudit.flows.monitoring import monitor_tables

    return monitor_tables(db_url, audit, as_of, now)


def persist(
    db_url: str,
    run_id: int,
    record: RunRecord,
    result: AuditResult,
    quarantine: pd.DataFrame,
    force: bool = False,
    extra: dict[type, pd.DataFrame] | None = None,
) -> SavedRun:
    """Commit the results (and ``extra`` tables, e.g. monitor_results) as the next version;
    returns the saved run (db.store.runs.SavedRun: id, whether it is new, version)."""
    tables = {**result_tables(result.frames()), **(extra or {})}
    with engine_scope(db_url) as engine:
        saved = save_run(engine, run_id, record, tables, quarantine, force=force)
    release_run(run_id)
    return saved


def record_failure(
    db_url: str, run_id: int | None, record: RunRecord, error: str, quarantine: pd.DataFrame | None
) -> int:
    """Mark the run failed with its error; no results become visible."""
    with engine_scope(db_url) as engine:
        failed = record_failed_run(engine, run_id, record, error, quarantine)
    release_run(run_id)
    return failed


def give_up(db_url: str, run_id: int, record: RunRecord, error: str) -> bool:
    """Mark a begun run failed with ``error`` unless it committed; whether it is stored."""
    with engine_scope(db_url) as engine:
        record_failed_run(engine, run_id, record, error)
        stored = run_status(engine, run_id) == SUCCEEDED
    release_run(run_id)
    return stored


def report(
    db_url: str,
    run_id: int,
    audit_name: str,
    version: int,
    completeness: pd.DataFrame | None = None,
) -> str:
    """Write the run's HTML report and publish its first screen and comparisons as Prefect
    artifacts when inside a Prefect run (flows.report); ``completeness``: the label-completeness
    table of the audit that just stored the run, which the report then does not recompute."""
    return write_report(db_url, run_id, audit_name, version, completeness)


# Each database step: what it does, for the one line of a step that transient errors still end.
DATABASE_STEPS = {
    "begin": "recording the run's start",
    "scan": "reading the audit's source",
    "previous_run": "reading the previous run's results (for comparison)",
    "identical_run": "looking for a stored run of identical input",
    "monitor": "reading the monitored audit's increment and state",
    "persist": "writing the run's results",
    "record_failure": "recording the run's failure",
    "report": "reading the run's results for its report",
}


# ---- the body --------------------------------------------------------------------------------


def _explained(run: Runner, url: str, audit: Audit) -> Runner:
    """``run`` with a database step that a transient error still ends (its retries spent) failing
    as one line: the step, its database (the source's for the scan), what to do (db.retry)."""

    def explained(name: str, function: Callable[P, R], /, *args: P.args, **options: P.kwargs) -> R:
        try:
            return run(name, function, *args, **options)
        except Exception as exc:
            if name not in DATABASE_STEPS or not is_transient(exc):
                raise
            where = safe_url(source_url(audit, url) if name == "scan" else url)
            raise step_failed(DATABASE_STEPS[name], where, exc) from exc

    return explained


def run_audit(
    audit_name: str,
    config_path: str | None = None,
    db_url: str | None = None,
    as_of: datetime | None = None,
    force: bool = False,
    timezone: str | None = None,
) -> dict:
    """The audit as plain function calls: no Prefect run, no retries, no Prefect import."""
    return execute_audit(audit_name, config_path, db_url, as_of, force, run=call, timezone=timezone)


def execute_audit(
    audit_name: str,
    config_path: str | None,
    db_url: str | None,
    as_of: datetime | None,
    force: bool,
    run: Runner,
    flow_run_id: str | None = None,
    cron: str | None = None,
    timezone: str | None = None,
) -> dict:
    """begin -> scan -> counts -> core stages -> persist -> report, each through ``run``; the
    window as in ``new_record`` (``cron``: the schedule of a scheduled run)."""
    audit = load_audit(Path(config_path or default_config_path()), audit_name)
    url = database_url(db_url)
    run = _explained(run, url, audit)
    record = new_record(audit, as_of or datetime.now(UTC), flow_run_id, cron, timezone)
    thresholds, timings = audit.thresholds, record.timings
    run_id = run("begin", begin, url, record, timedelta(hours=thresholds.stale_run_hours))
    quarantine = None
    try:
        with timed(timings, f"scan ({audit.scan.mode})"):
            scanned = run(
                "scan", scan, url, audit, record.window_start, record.window_end, record.started_at
            )
        quarantine = scanned.quarantine
        record.rows_read, record.rows_valid = scanned.rows_read, scanned.rows_valid
        record.rows_unlabelled = scanned.rows_unlabelled
        record.rows_quarantined = scanned.rows_read - scanned.rows_valid
        record.input_fingerprint = input_fingerprint(scanned)
        try:
            check_invalid_fraction(
                record.rows_read,
                record.rows_quarantined,
                thresholds.max_invalid_fraction,
                quarantine,
            )
        except TooManyInvalidRows as exc:
            raise _invalid_rows(exc, run_id, audit, quarantine) from None
        existing = None if force else run("identical_run", identical_run, url, run_id, record)
        completeness = None  # this run's label completeness, when it computed and stored it
        if existing is not None:
            saved, record.summary = existing
        else:
            saved, completeness = _audit_and_persist(
                run, url, audit, run_id, record, scanned, force
            )
    except Exception as exc:
        run(
            "record_failure",
            record_failure,
            url,
            run_id,
            record,
            one_line(exc, limit=ERROR_CHARACTERS),
            quarantine,
        )
        raise
    finally:
        release_run(run_id)
    run_id = saved.run_id
    STORED_RUNS.append({"run_id": run_id, "version": saved.version, "audit": audit.name})
    _print_outcome(audit, saved, record)
    if warning := record.summary.get("threshold_warning"):
        log.warning(warning)
        print(f"  warning: {warning}")
    outcome = {
        "audit": audit.name,
        "model": audit.model_id,
        "run_id": run_id,
        "version": saved.version,
        "new": saved.new,
        "flagged": len(record.summary.get("flagged") or []),
        "alarms": int(record.summary.get("monitor_alarms") or 0),
        "report": None,
    }
    try:
        outcome["report"] = run(
            "report", report, url, run_id, audit.name, saved.version, completeness
        )
    except Exception as exc:  # noqa: BLE001 - the run has committed: a failing report fails alone
        # in the outcome too: a command that hides Prefect's logs (where this print goes) says why
        outcome["report_error"] = f"{type(exc).__name__}: {exc}"
        print(
            f"{run_label(run_id, saved.version)} succeeded; its report was not written: "
            f"{outcome['report_error']}"
        )
    return outcome


def _invalid_rows(
    error: TooManyInvalidRows, run_id: int, audit: Audit, quarantine: pd.DataFrame | None
) -> TooManyInvalidRows:
    """``error`` with the run's id and, when some rows were valid, each failing column (the
    source's name), how many rows it failed, what it accepts and its first bad value."""
    if isinstance(error, NoValidRows) or quarantine is None or quarantine.empty:
        return type(error)(f"run {run_id}: {error}")
    ordered = quarantine.sort_values("row_number", kind="stable")
    rows = ordered.groupby("column_name", sort=False)["row_number"].nunique()
    columns = []
    for column, count in rows.sort_values(ascending=False, kind="stable").head(3).items():
        first = ordered[ordered["column_name"] == column].iloc[0]
        value = "NULL" if first["value"] is None else repr(str(first["value"])[:40])
        name = audit.source_column(str(column))
        where = f"{name!r} ({column})" if name != column else repr(column)
        unknown = " (NULL: an unknown outcome)" if column == "y_true" else ""
        columns.append(
            f"column {where} of {audit.source!r}: {count} rows, accepted {first['rule']}{unknown}, "
            f"first bad value {value} (prediction {first['row_ref']!r})"
        )
    text = str(error).removesuffix("; see quarantined_rows")
    return type(error)(
        f"run {run_id}: {text}; {'; '.join(columns)}; see `biasaudit quarantine {run_id}`"
    )


def _audit_and_persist(
    run: Runner,
    url: str,
    audit: Audit,
    run_id: int,
    record: RunRecord,
    scanned: Scanned,
    force: bool,
) -> tuple[SavedRun, pd.DataFrame | None]:
    """counts -> core stages -> monitor -> persist, for a run whose input is new; the saved run
    and, when it holds this run's results, their label completeness (for its report)."""
    timings = record.timings
    with timed(timings, "counts"):
        counts = run("counts", group_counts, scanned.cells, audit.attributes, audit.intersections)
    previous = run(  # the previous as-of, and whether its window overlaps (then untested)
        "previous_run",
        previous_run,
        url,
        audit.name,
        audit.model_id,
        record.as_of,
        record.window_start,
    )
    arrival = None
    if scanned.arrival is not None:  # the labels' arrival times tell the two mechanisms apart
        arrival = run(
            "arrival",
            arrival_evidence_of_counts,
            scanned.arrival,
            audit.attributes,
            audit.intersections,
            audit.thresholds.alpha,
        )
    result = audit_counts(counts, audit, previous=previous, timings=timings, arrival=arrival)
    if scanned.score_counts is not None and scanned.score_bins is not None:  # the score whole
        scores = run(
            "scores",
            score_audit,
            scanned.score_counts,
            scanned.score_bins,
            audit.reference_groups,
            confidence=1 - audit.thresholds.alpha,
        )
        scoring = run(
            "scoring",
            scoring_rates,
            scanned.score_counts,
            scanned.score_median,
            scanned.scores_in_window,
        )
        result = replace(result, **scores, scoring=scoring)
    record.summary = {**result.summary, "threshold_warning": threshold_warning(audit, scanned)}
    monitoring = {}
    if audit.monitor is not None:  # this run's increment, anytime-valid alarms
        with timed(timings, "monitor"):
            monitoring = run("monitor", monitor, url, audit, record.as_of, record.started_at)
        alarms = sum(int(frame["alarm"].sum()) for frame in monitoring.values() if "alarm" in frame)
        record.summary["monitor_alarms"] = alarms
    with timed(timings, "persist"):
        saved = run(
            "persist", persist, url, run_id, record, result, scanned.quarantine, force, monitoring
        )
    return saved, result.completeness if saved.new else None


def threshold_warning(audit: Audit, scanned: Scanned) -> str | None:
    """Where the audit decides from a score, a warning when its threshold lies outside the
    valid scores' range, so that every valid prediction got the same decision (a 0-100 score
    with ``threshold = 0.5``): the threshold is likely on another scale than the score's."""
    if audit.decision is None or not scanned.rows_valid:
        return None
    decided = scanned.cells.loc[scanned.cells["n"] > 0, "y_pred"].unique()
    if len(decided) != 1:
        return None
    where, what = ("at or below", "positive") if decided[0] == 1 else ("above", "negative")
    median = scanned.score_median
    middle = "" if pd.isna(median) else f", whose median is {median:.6g}"
    return (
        f"the threshold {audit.decision.threshold:g} lies {where} every valid score of "
        f"{audit.decision.score!r}{middle}: all {scanned.rows_valid} predictions are decided "
        f"{what}; is the threshold on the score's own scale ([audits.decision] threshold)?"
    )


def _print_outcome(audit: Audit, saved: SavedRun, record: RunRecord) -> None:
    status = "new" if saved.new else "unchanged input: the existing run"
    # an existing run's stored summary may predate a key: "?" rather than a failed re-run
    summary = defaultdict(lambda: "?", {"flagged": [], **record.summary})
    print(
        f"audit {audit.name}: {run_label(saved.run_id, saved.version)}, {status}: "
        f"{record.rows_valid} valid rows, "
        f"{record.rows_quarantined} quarantined, {summary['undefined_metrics']} undefined metric "
        f"values, {summary['match_below_alpha']} of {summary['match_tests']} MATCH tests below α, "
        f"{len(summary['flagged'])} of {summary['detection_tests']} detection tests flagged"
    )
    for line in summary["flagged"]:
        print(f"  flagged: {printable(line)}")  # the line names groups: data, never obeyed
